"""asymspec_vl.core.row_chunks and the loop's rule and logprobs a chunk of rows at a time: every method's rule (greedy
and seeded sampling, one vocabulary and across a map, logits full of ties) decides in chunks of 1, 2 or 3 rows
exactly what one call over the batch decides, each row's generator consumed the same; and the loop's transient
peak stays bounded independent of batch (counted from the torch profiler's memory events, never timed)."""

import pytest
import torch
from asymspec_vl.evals.benchmarks.bench_sampler_memory import peak_bytes
from asymspec_vl.evals.benchmarks.bench_vocab_map import random_map

from asymspec_vl.core import row_chunks, sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.gate import StepOutcome
from asymspec_vl.core.loop import Plan
from asymspec_vl.core.methods import METHODS

B, K, V, VV = 7, 3, 40, 32
HOT = dict(temperature=0.8, top_p=0.9, top_k=12, min_p=0.02, seed=5)


def test_a_chunk_holds_the_budget_and_at_least_one_row():
    assert row_chunks.rows_per_chunk(5, 151_936) == 12  # K = 4, Qwen's vocabulary
    assert row_chunks.rows_per_chunk(5, 100, budget=1000) == 2
    assert row_chunks.rows_per_chunk(5, 10**9) == 1
    assert row_chunks.spans(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert row_chunks.spans(0, 3) == [slice(0, 0)]


def test_outcomes_are_cut_and_joined_in_row_order():
    whole = StepOutcome(
        torch.arange(5),
        torch.arange(5) * 10,
        torch.arange(5) % 2 == 0,
        torch.rand(5, 3),
    )
    parts = [row_chunks.rows_of(whole, s) for s in row_chunks.spans(5, 2)]
    joined = row_chunks.cat_outcomes(parts)
    for name in ("num_accepted", "token", "is_bonus", "divergence"):
        assert torch.equal(getattr(joined, name), getattr(whole, name))
    plain = StepOutcome(whole.num_accepted, whole.token, whole.is_bonus)
    parts = [row_chunks.rows_of(plain, s) for s in row_chunks.spans(5, 2)]
    assert row_chunks.cat_outcomes(parts).divergence is None


def step_logits(method: str, vmap, gen: torch.Generator) -> dict:
    """Logits of small integer values (ties everywhere: the tie rules are exercised) for every name the rules read:
    drafter space [B, n, Vd], t [B, K+1, Vv]."""
    vd, vv = (V, V) if vmap is None else (vmap.drafter_size, vmap.verifier_size)

    def x(n, width):
        return torch.randint(-3, 4, (B, n, width), generator=gen).float()

    if method in ("floor", "drafter"):
        return {"t": x(1, vv)} if method == "floor" else {"q": x(1, vd)}
    return {
        "a": x(K, vd),
        "b": x(K + 1, vd),
        "t": x(K + 1, vv),
        "sd": x(K, vd),
        "drafted": x(K, vd),
    }


def drafts_for(method: str, vmap, gen) -> torch.Tensor:
    if method in ("floor", "drafter"):
        return torch.zeros(B, 0, dtype=torch.long)
    if vmap is None:
        return torch.randint(0, V, (B, K), generator=gen)
    ids = vmap.verifier_ids
    return ids[torch.randint(0, len(ids), (B, K), generator=gen)]


def decide_and_logprobs(plan: Plan, logits: dict, drafts: torch.Tensor, budget: int):
    saved = row_chunks.CHUNK_ELEMENTS
    row_chunks.CHUNK_ELEMENTS = budget
    try:
        outcome = plan.decide(logits, drafts)
        return outcome, plan.logprobs(logits, outcome, drafts)
    finally:
        row_chunks.CHUNK_ELEMENTS = saved


CASES = [
    (m, s, fam)
    for fam in ("one vocabulary", "across a map")
    for m in ("asymspec", "sd", "scd", "floor", "drafter")
    for s in (False, True)
]


@pytest.mark.parametrize(("method", "samples", "family"), CASES)
def test_every_rule_in_chunks_decides_exactly_what_one_call_decides(
    method, samples, family
):
    vmap = random_map(V, VV, 24, seed=1) if family == "across a map" else None
    gen = torch.Generator().manual_seed(3)
    logits, drafts = step_logits(method, vmap, gen), drafts_for(method, vmap, gen)
    cfg = AsymSpecConfig(K=K, logprobs=2, **(HOT if samples else {}))
    banned = torch.zeros(VV if vmap is not None else V, dtype=torch.bool)
    banned[1] = True
    results = []
    for rows in (B, 1, 2, 3):  # one call, then chunks of 1, 2 and 3 rows
        plan = Plan(METHODS[method], cfg, None, [], banned, vmap=vmap)
        plan.gens = sampling.generators(cfg, B, "cpu") if samples else None
        n = drafts.shape[1] + 1
        outcome, lps = decide_and_logprobs(
            plan, logits, drafts, rows * n * row_chunks.vocab_of(logits)
        )
        states = [g.get_state() for g in plan.gens] if samples else []
        results.append((outcome, lps, states))
    one, *chunked = results
    for outcome, lps, states in chunked:
        for name in ("num_accepted", "token", "is_bonus"):
            assert torch.equal(getattr(outcome, name), getattr(one[0], name)), name
        if one[0].divergence is not None:
            assert torch.equal(outcome.divergence, one[0].divergence)
        assert [[t.to_dict() for t in row] for row in lps] == [
            [t.to_dict() for t in row] for row in one[1]
        ]
        assert all(torch.equal(a, b) for a, b in zip(states, one[2]))


@pytest.mark.parametrize("samples", [False, True])
def test_the_loops_rule_peaks_the_same_whatever_the_batch(samples):
    """SCD and AsymSpec (the loop's costliest rules) at K = 4 with chunks of 4 rows: the transient peak of the rule
    and the logprobs at B = 8 and B = 32 is the same and within 16 [64, V] float32 blocks' share of the budget
    (12 rows a chunk there); one call over 32 rows peaks at over three times that."""
    vocab, k = 1024, 4
    budget = 4 * (k + 1) * vocab
    cfg = AsymSpecConfig(K=k, logprobs=2, **(HOT if samples else {}))
    peaks = {}
    for method in ("scd", "asymspec"):
        for batch in (8, 32):
            gen = torch.Generator().manual_seed(0)
            logits = {
                "a": torch.randn(batch, k, vocab, generator=gen),
                "b": torch.randn(batch, k + 1, vocab, generator=gen),
                "t": torch.randn(batch, k + 1, vocab, generator=gen),
            }
            drafts = torch.randint(0, vocab, (batch, k), generator=gen)
            plan = Plan(METHODS[method], cfg, None, [], None)
            plan.gens = sampling.generators(cfg, batch, "cpu") if samples else None
            for name, size in (("chunked", budget), ("one call", 1 << 62)):
                peaks[method, batch, name] = peak_bytes(
                    lambda plan=plan, logits=logits, drafts=drafts, size=size: (
                        decide_and_logprobs(plan, logits, drafts, size)
                    )
                )
    block = 64 * vocab * 4
    for method in ("scd", "asymspec"):
        small, large = peaks[method, 8, "chunked"], peaks[method, 32, "chunked"]
        assert abs(large - small) < 0.05 * small, (method, small, large)
        assert large <= 16 * block * 4 / 12, (method, large / block)
        assert peaks[method, 32, "one call"] > 3 * large, method
