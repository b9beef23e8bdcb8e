"""vllm_patches.sampler decides a group's rows a chunk at a time (core/row_chunks.py): the step's tokens, logprobs
and each row's generator are exactly those of one call over the group, for every rule (greedy and seeded, one
vocabulary and across a map, logits full of ties, two groups interleaved, some rows asking for logprobs); and a
group's transient peak at K = 4 stays within 16 [64, V] float32 blocks and the same whatever the batch (counted
from the torch profiler's memory events, never timed). The sampler before chunking peaked at 40-60 blocks."""

import pytest
import torch
from asymspec_vl.evals.benchmarks.bench_sampler_memory import peak_bytes
from asymspec_vl.evals.benchmarks.bench_vocab_map import random_map
from vllm.v1.sample.sampler import Sampler

from asymspec_vl.core import row_chunks
from vllm_patches import sampler
from vllm_patches.sampler_profile import (
    DummyProposer,
    dummy_rows,
    dummy_step,
    worst_config,
)

K, V, VV = 3, 48, 40
ORDER = (
    "ABAABAA"  # the batch: rows of the tested group (A) and of a greedy SD group (B)
)


class FixedProposer(DummyProposer):
    """The dummy proposer with fixed drafter logits per row (name -> req_id -> [K + 1, Vd]): a chunk reads its
    rows' own, as a real proposer's stored a and x_comp pass."""

    def __init__(self, rows, store, vmap):
        super().__init__(rows, None, torch.float32, "cpu", vmap)
        self.store = store

    def step_logits(self, name, req_ids, n, token_index=None, drafts=None):
        return torch.stack([self.store[name][r][:n] for r in req_ids])


def build_step(method: str, samples: bool, vmap):
    """Rows, proposer, batch, verifier logits, spec metadata of one step of ORDER; integer logits (ties)."""
    gen = torch.Generator().manual_seed(11)
    vd, vv = (V, V) if vmap is None else (vmap.drafter_size, vmap.verifier_size)
    n_a = 0 if method == "floor" else K
    cfg_a = worst_config(K, samples, 3)
    cfg_b = worst_config(K, False, 3)
    a_rows = dummy_rows(method, cfg_a, ORDER.count("A"), vv, vd, "cpu", vmap)
    b_rows = dummy_rows("sd", cfg_b, ORDER.count("B"), vv, vd, "cpu", vmap)
    a_ids, b_ids = iter(a_rows), iter(b_rows)
    req_ids, num_drafts, rows = [], [], {}
    for g in ORDER:
        r = next(a_ids) if g == "A" else next(b_ids)
        rid = f"{g}-{r}"
        rows[rid] = (a_rows if g == "A" else b_rows)[r]
        req_ids.append(rid)
        num_drafts.append(n_a if g == "A" else K)
    store = {
        name: {
            r: torch.randint(-3, 4, (K + 1, vd), generator=gen).float() for r in rows
        }
        for name in ("a", "b", "sd", "drafted")
    }
    shared = (vmap.verifier_ids if vmap is not None else torch.arange(vv))[1:-1]
    drafts = shared[torch.randint(0, len(shared), (sum(num_drafts),), generator=gen)]
    logits = torch.randint(-3, 4, (sum(num_drafts) + len(ORDER), vv), generator=gen)
    asking = {r: 3 for i, r in enumerate(req_ids) if i not in (3, 6)}
    batch = sampler.StepBatch(
        req_ids, [[] for _ in req_ids], [None] * len(req_ids), asking, 3
    )
    meta = type("Meta", (), {"num_draft_tokens": num_drafts, "draft_token_ids": drafts})
    return rows, FixedProposer(rows, store, vmap), batch, logits.float(), meta


def run(method, samples, vmap, rows_per_chunk: int | None):
    rows, proposer, batch, logits, meta = build_step(method, samples, vmap)
    saved = row_chunks.CHUNK_ELEMENTS
    if rows_per_chunk is not None:  # a chunk of that many rows at the step's widest
        row_chunks.CHUNK_ELEMENTS = rows_per_chunk * (K + 1) * max(V, VV)
    try:
        out = sampler.sample(
            proposer,
            batch,
            logits,
            meta,
            torch.arange(len(logits)),
            None,
            Sampler("raw_logprobs"),
        )
    finally:
        row_chunks.CHUNK_ELEMENTS = saved
    states = [s.generator.get_state() for s in rows.values() if s.generator is not None]
    return out, states


CASES = [
    (m, s, fam)
    for fam in ("one vocabulary", "across a map")
    for m in ("asymspec", "sd", "scd", "floor")
    for s in (False, True)
]


@pytest.mark.parametrize(("method", "samples", "family"), CASES)
def test_every_rule_in_chunks_gives_the_tokens_and_logprobs_of_one_call(
    method, samples, family
):
    vmap = random_map(V, VV, 30, seed=2) if family == "across a map" else None
    one, states = run(method, samples, vmap, None)  # toy shapes: one chunk a group
    for size in (1, 2, 3):
        got, got_states = run(method, samples, vmap, size)
        assert torch.equal(got.sampled_token_ids, one.sampled_token_ids), size
        for x, y in zip(got.logprobs_tensors[:3], one.logprobs_tensors[:3]):
            assert torch.equal(x, y), size
        assert all(torch.equal(a, b) for a, b in zip(got_states, states)), size
    assert (one.sampled_token_ids[:, 0] >= 0).all()  # every row committed a token


@pytest.mark.parametrize(
    ("method", "samples", "family"),
    [
        ("asymspec", True, "one vocabulary"),
        ("asymspec", False, "one vocabulary"),
        ("scd", True, "one vocabulary"),
        ("asymspec", True, "across a map"),
        ("scd", True, "across a map"),
    ],
)
def test_a_groups_peak_is_bounded_independent_of_batch(method, samples, family):
    """The worst rules at K = 4 with logprobs, the chunk budget scaled to this vocabulary as to Qwen's (12 rows):
    at B = 64 the peak is under 16 [64, V] float32 blocks, at B = 160 the same; one call over 64 rows peaks at
    over 40 blocks (the sampler before chunking)."""
    k, vocab = 4, 4096
    vmap = random_map(vocab, 3456, 2950, seed=0) if family == "across a map" else None
    vocab_v = vmap.verifier_size if vmap is not None else vocab
    block = 64 * vocab * 4

    def peak(batch: int, budget: int) -> float:
        logits = torch.randn(batch * (k + 1), vocab_v).bfloat16()
        saved = row_chunks.CHUNK_ELEMENTS
        row_chunks.CHUNK_ELEMENTS = budget
        try:
            return (
                peak_bytes(
                    lambda: dummy_step(
                        method,
                        samples,
                        logits,
                        k,
                        vocab,
                        torch.bfloat16,
                        Sampler("raw_logprobs"),
                        20,
                        vmap,
                    )
                )
                / block
            )
        finally:
            row_chunks.CHUNK_ELEMENTS = saved

    budget = 12 * (k + 1) * vocab
    at_64, at_160 = peak(64, budget), peak(160, budget)
    assert at_64 <= 16, at_64
    assert abs(at_160 - at_64) < 0.5, (at_64, at_160)
    assert peak(64, 1 << 62) > 40
