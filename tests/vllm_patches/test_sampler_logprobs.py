"""vllm_patches.sampler_logprobs.StepLogprobs: the step's LogprobsTensors assembled from chunks of rows. A decided
row that asks reads, at each position where it committed a token, the library's logprob of that token
(core/logprobs.py's step_logprobs, the transformers backend's values); every other position reads t; rows never
added (hidden tokens, vLLM's own sampler's) are read from t at the end; the chunks' order does not matter."""

import torch
from vllm.v1.sample.sampler import Sampler

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.gate import StepOutcome
from asymspec_vl.core.logprobs import step_logprobs
from asymspec_vl.core.methods import METHODS
from vllm_patches.sampler import StepBatch
from vllm_patches.sampler_logprobs import StepLogprobs

V, n = 16, 2
W = n + 1


def test_chunks_give_the_librarys_logprobs_where_a_row_committed_and_t_elsewhere():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(
        3 * W, V, generator=gen
    )  # [num_tokens, V] rows 0, 1, 2 with n drafts each
    step = {x: torch.randn(3, W, V, generator=gen) for x in ("a", "b")}
    step["t"] = logits.view(3, W, V)
    drafts = torch.tensor([[3, 4], [5, 6], [7, 8]])
    outcome = StepOutcome(
        torch.tensor([1, 0, 2]),
        torch.tensor([9, 10, 11]),
        torch.tensor([False, False, True]),
    )
    cfg = AsymSpecConfig(K=n, logprobs=2)
    out = torch.tensor([[3, 9, -1], [10, -1, -1], [7, 8, 11]], dtype=torch.int32)
    batch = StepBatch(
        ["r0", "r1", "r2"], [[], [], []], [None] * 3, {"r0": 2, "r2": 2}, 2
    )
    lp = StepLogprobs(batch, Sampler("raw_logprobs"), logits, [0, W, 2 * W, 3 * W], W)
    method = METHODS["asymspec"]
    for rows in ([2], [0]):  # chunks out of order; row 1 never added (read from t)
        sel = torch.tensor(rows)
        part = StepOutcome(
            *(x[sel] for x in (outcome.num_accepted, outcome.token, outcome.is_bonus))
        )
        lp.add(
            rows,
            out,
            (method, cfg, {k: x[sel] for k, x in step.items()}, part, n, None),
        )
    got = lp.tensors(out)
    want = step_logprobs("asymspec", cfg, step, outcome, drafts, 2)
    for i in (0, 2):  # the rows that ask: the library's values at their tokens
        for j, tok in enumerate(want[i]):
            assert got.logprob_token_ids[i * W + j, 0] == tok.token_id
            assert torch.isclose(got.logprobs[i * W + j, 0], torch.tensor(tok.logprob))
            assert got.logprob_token_ids[i * W + j, 1:].tolist() == [
                t for t, _ in tok.top
            ]
    t_lp = logits.log_softmax(-1)
    for i, j in (
        (0, 2),
        (1, 0),
        (1, 1),
    ):  # past row 0's tokens; row 1 (asks none, never added): t
        token = max(int(out[i, j]), 0)
        assert torch.equal(got.logprobs[i * W + j, 0], t_lp[i * W + j, token])
