"""bench_speed's cost model (evals/benchmarks/speed_measure.py): n_d drafter forwards per step, and the bound
MAL * c_v / (n_d c_d + c_v) it measures each method against."""

import pytest
from asymspec_vl.evals.benchmarks.speed_measure import VARIANTS, bound


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
