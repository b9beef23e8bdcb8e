"""bench_speed's cost model (evals/benchmarks/speed_measure.py): n_d drafter forwards per step, and the bound
MAL * c_v / (n_d c_d + c_v) it measures each method against; the decoding counted after each row's first step
(never more than K + 1 tokens an iteration)."""

from types import SimpleNamespace

import pytest
from asymspec_vl.evals.benchmarks.speed_measure import (
    VARIANTS,
    Batch,
    Timing,
    bound,
    summarize,
)

from asymspec_vl.core.trace import Stats


@pytest.mark.parametrize(
    "key, n_d",
    [
        ("floor", 0),
        ("drafter", 0),
        ("sd-K2", 2),
        ("sd-K4", 4),
        ("asymspec-K2", 3),
        ("asymspec-K4", 5),
    ],
)
def test_drafter_forwards_count_the_drafts_and_asymspecs_x_comp_scoring_pass(key, n_d):
    # SD: K drafter forwards; AsymSpec: K drafts on x_full + one drafter pass over x_comp (the b logits)
    assert VARIANTS[key].drafter_forwards == n_d


def test_the_bound_counts_n_d_drafter_forwards_and_one_verifier_forward():
    assert bound(gain=2.0, c_d=1.0, c_v=10.0, drafter_forwards=3) == 2.0 * 10.0 / (
        3 * 1.0 + 10.0
    )
    assert (
        bound(gain=1.0, c_d=5.0, c_v=5.0, drafter_forwards=0) == 1.0
    )  # no drafting: the Floor itself


def _timing(rows: list[tuple[int, int, int]], cpu_s: float) -> Timing:
    """A Timing of one call whose rows each (emitted, steps, accepted)."""
    t = Timing()
    results = [
        SimpleNamespace(
            token_ids=list(range(e)),
            stats=Stats(emitted=e, steps=s, accepted=a, drafted=4 * s),
        )
        for e, s, a in rows
    ]
    t.add(results, cpu_s=cpu_s, wall_s=cpu_s)
    return t


def _batches(spec_full, spec_first, floor_full, floor_first, drafter=(10, 10, 0)):
    return {
        "floor": [Batch(_timing([floor_full], 1.3), _timing([floor_first], 0.2))],
        "drafter": [Batch(_timing([drafter], 0.2), _timing([(1, 1, 0)], 0.1))],
        "asymspec-K4": [Batch(_timing([spec_full], 0.5), _timing([spec_first], 0.2))],
    }


def test_the_first_steps_generated_tokens_are_not_counted_as_decoded():
    # K = 4: an answer of 12 tokens in steps of 5, 5, 2; the 1-token run ran the same first step (4 accepted,
    # 5 generated) and kept 1 of them. Decoded after the first step: 7 tokens in 2 iterations, never 11 in 2
    rows = summarize(_batches((12, 3, 9), (1, 1, 4), (12, 12, 0), (1, 1, 0)))
    spec = rows["asymspec-K4"]
    assert spec["tokens"] == 7 and spec["tokens_per_iteration"] == 3.5
    assert spec["tokens_per_iteration"] <= VARIANTS["asymspec-K4"].K + 1
    assert spec["tokens_per_s"] == pytest.approx(7 / 0.3)
    assert rows["floor"]["tokens"] == 11 and rows["floor"]["tokens_per_iteration"] == 1


def test_an_answer_that_ends_inside_the_first_step_decodes_nothing_after_it():
    # K = 2, batch 2. Row 1: 2 tokens, its stop token the first of the first step's 2 accepted drafts (3 generated,
    # 2 kept): the full run is that one step. Row 2: 8 tokens in 3 steps, 3 of them in the first
    rows = summarize(
        {
            **_batches((12, 3, 9), (1, 1, 4), (12, 12, 0), (1, 1, 0)),
            "asymspec-K2": [
                Batch(
                    _timing([(2, 1, 2), (8, 3, 5)], 0.5),
                    _timing([(1, 1, 2), (1, 1, 2)], 0.2),
                )
            ],
        }
    )
    spec = rows["asymspec-K2"]
    assert spec["tokens"] == 0 + 5 and spec["tokens_per_iteration"] == 5 / 2


def test_c_v_of_k_plus_1_replaces_the_one_token_forward_by_the_k_plus_1_token_one():
    # the Floor's step: 1.1 s over 11 iterations = 100 ms; the verifier's forward over 5 tokens a row costs 4 ms
    # more than over one, so a K = 4 step's verification costs 104 ms and its bound is priced with it
    batches = _batches((12, 3, 9), (1, 1, 4), (12, 12, 0), (1, 1, 0))
    plain = summarize(batches)["asymspec-K4"]
    assert "bound_wide" not in plain
    spec = summarize(batches, forward_s={1: 0.010, 3: 0.012, 5: 0.014})["asymspec-K4"]
    c_v, c_d = spec["c_v_ms"], spec["c_d_ms"]
    assert c_v == pytest.approx(100.0) and spec["c_v_wide_ms"] == pytest.approx(104.0)
    gain = spec["tokens_per_iteration"] / 1.0
    assert spec["bound"] == pytest.approx(gain * c_v / (5 * c_d + c_v))
    assert spec["bound_wide"] == pytest.approx(gain * c_v / (5 * c_d + 104.0))
    assert spec["of_bound_wide"] == pytest.approx(spec["speedup"] / spec["bound_wide"])
