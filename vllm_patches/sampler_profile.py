"""The sampler's worst case on dummy rows, for vLLM's memory profile (issue 43): vLLM's profile run samples with its
own Sampler and rejection sampler, never with this engine's rules, so the KV cache would be sized without their
transient memory in view. dummy_step runs sampler.sample on rows that exist nowhere else (its own RowStates and
generators, a stand-in proposer that hands random drafter logits): no request is touched and nothing is left in
any request state; the caller (hooks/runner_patch.py, inside the profile run) hands the verifier's logits.

The rows ask what costs the most memory: sampling with every filter of vLLM's (min_p, top_k, top_p: a sort of the
vocabulary), min_tokens holding a stop token at every position (a copy of each logits), and logprobs for every row.
PROFILED lists the rules run, those whose chunk peaks highest (evals/benchmarks/bench_sampler_memory.py measures
every rule: AsymSpec's, either bonus, greedy where no fused kernel runs, SCD's and sampled SD's; Floor's and greedy
SD's peak far lower); the profile sees the largest.
"""

from __future__ import annotations

import types

import torch

from asymspec_vl.core import sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS

from . import sampler
from .requests.request_args import AsymSpecRequest
from .requests.rows import RowState

# (method, samples, bonus): the rules the profile runs, each over every dummy row
PROFILED = (
    ("asymspec", True, "verifier"),
    ("asymspec", True, "fused"),
    ("asymspec", False, "verifier"),
    ("asymspec", False, "fused"),
    ("scd", True, "verifier"),
    ("scd", False, "verifier"),
    ("sd", True, "verifier"),
)
STOP = 0  # the stop token min_tokens holds (an id of both vocabularies)


def worst_config(
    K: int, samples: bool, num_logprobs: int | None, bonus: str = "verifier"
) -> AsymSpecConfig:
    """The config of the dummy rows: every filter on when they sample, min_tokens holding every position."""
    hot = dict(temperature=0.7, top_p=0.9, top_k=50, min_p=0.05, seed=0)
    return AsymSpecConfig(
        K=K,
        bonus=bonus,
        min_tokens=K + 2,
        logprobs=num_logprobs,
        **(hot if samples else {}),
    )


class DummyProposer:
    """The proposer the sampler reads, for dummy rows: their RowStates, and the drafter's logits of a step by name
    as random [G, n, Vd] tensors of the drafter's dtype (what the x_comp pass and the stored a hand a real step)."""

    def __init__(self, rows: dict, vocab_d: int, dtype: torch.dtype, device, vmap=None):
        self.rows, self.vocab_d, self.dtype, self.device = rows, vocab_d, dtype, device
        self.vmap = vmap

    def row(self, req_id: str) -> RowState:
        return self.rows[req_id]

    def step_logits(self, name, req_ids, n, token_index=None, drafts=None):
        return torch.randn(
            len(req_ids), n, self.vocab_d, dtype=self.dtype, device=self.device
        )


def dummy_rows(
    method: str,
    cfg: AsymSpecConfig,
    num_rows: int,
    vocab_v: int,
    vocab_d: int,
    device,
    vmap=None,
) -> dict[str, RowState]:
    """num_rows fresh RowStates of `method` (a generator each when cfg samples), one token banned in each vocabulary
    as a real row's structural tokens are; req_ids "asymspec-profile-<i>", never a request's."""
    request = AsymSpecRequest(METHODS[method], cfg, stop_ids=(STOP,))
    gens = (
        sampling.generators(cfg, num_rows, device) if cfg.samples else [None] * num_rows
    )
    banned_d = torch.zeros(vocab_d, dtype=torch.bool, device=device)
    banned_d[-1] = True
    banned_v = torch.zeros(vocab_v, dtype=torch.bool, device=device)
    banned_v[-1] = True
    return {
        f"asymspec-profile-{i}": RowState(
            request,
            cfg.K,
            banned=banned_d,
            banned_v=banned_v if vmap is not None else None,
            stop_ids_d=(STOP,) if vmap is not None else None,
            req_id=f"asymspec-profile-{i}",
            generator=gens[i],
        )
        for i in range(num_rows)
    }


def dummy_drafts(
    num_rows: int, n: int, vocab_v: int, device, vmap=None
) -> torch.Tensor:
    """[num_rows, n] draft ids a rule may read: across a map shared verifier ids (the drafter picks only those)."""
    g = torch.Generator().manual_seed(0)
    if vmap is None:
        return torch.randint(1, vocab_v - 1, (num_rows, n), generator=g).to(device)
    shared = vmap.verifier_ids[1:-1]
    return shared[torch.randint(0, len(shared), (num_rows, n), generator=g)].to(device)


def dummy_step(
    method: str,
    samples: bool,
    logits: torch.Tensor,
    n: int,
    vocab_d: int,
    dtype_d: torch.dtype,
    vllm_sampler,
    num_logprobs: int | None,
    vmap=None,
    bonus: str = "verifier",
):
    """sampler.sample on len(logits) / (n + 1) dummy rows of `method` with n drafts each: logits [rows * (n + 1),
    Vv] the verifier's; the drafter's logits random [G, n or n + 1, vocab_d] of dtype_d; vllm_sampler: vLLM's
    Sampler (the logprobs); num_logprobs: each row's (None: none asked); vmap: a cross-family engine's map; bonus:
    AsymSpec's. -> vLLM's SamplerOutput."""
    vocab_v, device = logits.shape[-1], logits.device
    num_rows = logits.shape[0] // (n + 1)
    K = max(n, 1)
    cfg = worst_config(K, samples, num_logprobs, bonus)
    rows = dummy_rows(method, cfg, num_rows, vocab_v, vocab_d, device, vmap)
    proposer = DummyProposer(rows, vocab_d, dtype_d, device, vmap)
    drafts = dummy_drafts(num_rows, n, vocab_v, device, vmap)
    req_ids = list(rows)
    asking = {r: num_logprobs for r in req_ids} if num_logprobs is not None else {}
    batch = sampler.StepBatch(
        req_ids, [[] for _ in req_ids], [None] * num_rows, asking, num_logprobs
    )
    meta = types.SimpleNamespace(
        num_draft_tokens=[n] * num_rows, draft_token_ids=drafts.flatten()
    )
    indices = torch.arange(logits.shape[0], device=device)
    return sampler.sample(proposer, batch, logits, meta, indices, None, vllm_sampler)
