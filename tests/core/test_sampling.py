"""The sampled rules (temperature > 0) on scripted logits: each emitted distribution against its exact value.

Every chi-square test draws with fixed seeds (row i's generator seeded base + i), so its statistic is one
fixed number: it cannot flake. The threshold is the chi-square critical value at p = 0.001 for the test's
degrees of freedom; a wrong rule (a rejection drawn from t instead of t + beta*delta, a gate at temperature
tau, SD's residual replaced by p) moves the statistic far past it (checked by hand while writing them).
"""

import math

import pytest
import torch

from asymspec_vl import AsymSpecConfig
from asymspec_vl.core import sampling as S
from asymspec_vl.core.gate import asymspec_step, greedy_verify

CHI2_999 = {
    1: 10.83,
    2: 13.82,
    3: 16.27,
    4: 18.47,
    5: 20.52,
    6: 22.46,
    7: 24.32,
    8: 26.12,
    9: 27.88,
    11: 31.26,
    15: 37.70,
    19: 43.82,
}  # chi-square critical values at p = 0.001, by degrees of freedom
N = 20000

# one step, K = 1, V = 4: position 1 (the draft's) and position 2 (the bonus's)
A = torch.tensor(
    [[[2.0, 1.5, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]]]
)  # the drafter on x_full
B = torch.tensor(
    [[[0.0, 1.5, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]
)  # the drafter on x_comp
T = torch.tensor(
    [[[1.0, 1.2, 0.8, 0.0], [0.5, 2.0, -1.0, 0.0]]]
)  # the verifier on x_comp


def chi2(counts: dict, exact: dict) -> tuple[float, int]:
    """Pearson's statistic over the outcomes of non-zero probability (an outcome of zero probability seen: inf)."""
    if any(k not in exact or exact[k] == 0 for k in counts):
        return math.inf, 0
    stat = sum(
        (counts.get(k, 0) - N * p) ** 2 / (N * p) for k, p in exact.items() if p > 0
    )
    return stat, sum(p > 0 for p in exact.values()) - 1


def rows(x: torch.Tensor) -> torch.Tensor:
    return x.expand(N, *x.shape[1:])


def hand_jsd(la: torch.Tensor, lb: torch.Tensor) -> float:
    p, q = la.exp(), lb.exp()
    m = (p + q) / 2
    return float(0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum())


def exact_asymspec(cfg: AsymSpecConfig) -> dict:
    """The rule's exact distribution of one step's committed tokens, computed by hand (no filters)."""
    tau = cfg.temperature
    q = (A[0, 0] / tau).softmax(-1)  # the draft's distribution
    la, lb, lt = (
        A[0, 0].log_softmax(-1),
        B[0, 0].log_softmax(-1),
        T[0, 0].log_softmax(-1),
    )
    gamma_eff = cfg.gamma * math.exp(-hand_jsd(la, lb))
    fused = ((T[0, 0] + cfg.beta * (A[0, 0] - B[0, 0])) / tau).softmax(-1)
    bonus = (T[0, 1] / tau).softmax(-1)
    out, rejected = {}, 0.0
    for d in range(4):
        if lt[d].exp() > gamma_eff * lb[d].exp():
            for y in range(4):
                out[(d, y)] = float(q[d] * bonus[y])
        else:
            rejected += float(q[d])
    for x in range(4):
        out[(x,)] = rejected * float(fused[x])
    return out


def committed(outcome, drafts) -> dict:
    counts: dict = {}
    for c in outcome.committed(drafts):
        counts[tuple(c)] = counts.get(tuple(c), 0) + 1
    return counts


def draw_asymspec(cfg: AsymSpecConfig, seed: int = 1):
    g = [torch.Generator().manual_seed(seed + i) for i in range(N)]
    drafts = S.draw(S.filtered_logprobs(rows(A[:, :1]).squeeze(1), cfg), g)[
        :, None
    ]  # [N, 1]
    return S.sample_asymspec(rows(A[:, :1]), rows(B), rows(T), drafts, cfg, g), drafts


@pytest.mark.parametrize("tau", [0.7, 1.3])
def test_asymspec_emits_the_rules_exact_distribution(tau):
    cfg = AsymSpecConfig(K=1, temperature=tau, gamma=0.9)
    exact = exact_asymspec(cfg)
    assert (
        0.1 < sum(p for k, p in exact.items() if len(k) == 1) < 0.9
    )  # both branches are exercised
    outcome, drafts = draw_asymspec(cfg)
    stat, dof = chi2(committed(outcome, drafts), exact)
    assert stat < CHI2_999[dof], (stat, dof)


def test_a_wrong_asymspec_rule_is_caught_by_the_same_statistic():
    """The test above can fail: a rejection drawn from filtered(t) (no delta) is rejected by the statistic."""
    cfg = AsymSpecConfig(K=1, temperature=0.7, gamma=0.9)
    exact = exact_asymspec(cfg)
    outcome, drafts = draw_asymspec(
        cfg.replace(beta=0.0)
    )  # the fused token without delta
    stat, dof = chi2(committed(outcome, drafts), exact)
    assert stat > 10 * CHI2_999[dof]


def test_asymspec_gate_reads_probabilities_at_temperature_one():
    """Acceptance is the greedy gate's, whatever tau: the same drafts pass at tau = 0.3 and tau = 3."""
    d = torch.arange(4)[:, None]
    a, b, t = A[:, :1].expand(4, 1, 4), B.expand(4, 2, 4), T.expand(4, 2, 4)
    greedy = asymspec_step(
        torch.cat([a, b[:, -1:]], 1), b, t, d, AsymSpecConfig(K=1, gamma=0.9)
    )
    for tau in (0.3, 3.0):
        g = [torch.Generator().manual_seed(i) for i in range(4)]
        out = S.sample_asymspec(
            a, b, t, d, AsymSpecConfig(K=1, gamma=0.9, temperature=tau), g
        )
        assert out.num_accepted.tolist() == greedy.num_accepted.tolist()
    assert 0 < int(greedy.num_accepted.sum()) < 4  # some drafts pass, some do not


def test_sd_emits_the_verifiers_distribution_exactly():
    """Lossless speculative sampling: the first token is distributed as filtered(t_1), the drafts are accepted
    with probability sum_d min(p(d), q(d)), and after an accept the bonus is filtered(t_2)."""
    cfg = AsymSpecConfig(K=1, temperature=0.8)
    q_logits = A[:, :1]
    g = [torch.Generator().manual_seed(7 + i) for i in range(N)]
    drafts = S.draw(S.filtered_logprobs(rows(q_logits).squeeze(1), cfg), g)[:, None]
    out = S.sample_sd(rows(T), rows(q_logits), drafts, cfg, g)
    first = [c[0] for c in out.committed(drafts)]
    p1, p2, q = (
        (T[0, 0] / 0.8).softmax(-1),
        (T[0, 1] / 0.8).softmax(-1),
        (A[0, 0] / 0.8).softmax(-1),
    )
    stat, dof = chi2(
        {(x,): first.count(x) for x in range(4)}, {(x,): float(p1[x]) for x in range(4)}
    )
    assert stat < CHI2_999[dof], stat
    accepted = int(out.num_accepted.sum())
    expected = N * float(torch.minimum(p1, q).sum())
    assert abs(accepted - expected) < 3.3 * math.sqrt(
        expected
    )  # 3.3 sigma: p ~ 0.001, fixed seeds
    seconds = [c[1] for c in out.committed(drafts) if len(c) == 2]
    n2 = len(seconds)
    stat = sum(
        (seconds.count(y) - n2 * float(p2[y])) ** 2 / (n2 * float(p2[y]))
        for y in range(4)
    )
    assert stat < CHI2_999[3], stat
    # the rule is not the verifier's distribution by accident: the drafter's q is far from it
    assert float((p1 - q).abs().sum()) > 0.3


def test_sd_without_the_residual_is_not_lossless():
    """A rejection drawn from p (not norm(max(0, p - q))) is caught: the first-token statistic explodes."""
    cfg = AsymSpecConfig(K=1, temperature=0.8)
    g = [torch.Generator().manual_seed(7 + i) for i in range(N)]
    drafts = S.draw(S.filtered_logprobs(rows(A[:, :1]).squeeze(1), cfg), g)[:, None]
    out = S.speculative_sampling(
        rows(T), S.filtered_logprobs(rows(T[:, :1]), cfg), drafts, cfg, g
    )  # q := p
    first = [c[0] for c in out.committed(drafts)]
    p1 = (T[0, 0] / 0.8).softmax(-1)
    stat, dof = chi2(
        {(x,): first.count(x) for x in range(4)}, {(x,): float(p1[x]) for x in range(4)}
    )
    assert stat > 10 * CHI2_999[dof]


def test_filters_match_vllms_definitions():
    """top_k keeps the k largest, top_p the smallest head of mass >= p, min_p the tokens >= min_p * max."""
    x = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    kept = lambda cfg: (S.filtered_logprobs(x, cfg) > float("-inf")).squeeze(0).tolist()  # noqa: E731
    assert kept(AsymSpecConfig(temperature=1.0, top_k=2)) == [
        True,
        True,
        False,
        False,
        False,
    ]
    p = x.softmax(-1)[0]
    assert kept(AsymSpecConfig(temperature=1.0, top_p=float(p[0]) + 0.01)) == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert kept(AsymSpecConfig(temperature=1.0, min_p=float(p[2] / p[0]) - 1e-4)) == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert kept(AsymSpecConfig(temperature=1.0, top_p=0.01)) == [
        True,
        False,
        False,
        False,
        False,
    ]
    cfg = AsymSpecConfig(temperature=0.5, top_k=3)
    assert torch.allclose(
        S.filtered_logprobs(x, cfg).exp()[0, :3], (x[0, :3] / 0.5).softmax(-1)
    )


@pytest.mark.parametrize("bonus", ["verifier", "fused"])
def test_tau_to_zero_is_algorithm_1(bonus):
    """At tau = 1e-6 the sampled rules commit exactly what the greedy rules commit (random logits, K = 3)."""
    torch.manual_seed(0)
    R, K, V = 64, 3, 50
    a, b, t = (
        torch.randn(R, K + 1, V) * 3,
        torch.randn(R, K + 1, V) * 3,
        torch.randn(R, K + 1, V) * 3,
    )
    cfg = AsymSpecConfig(K=K, bonus=bonus)
    hot = cfg.replace(temperature=1e-6)
    g = [torch.Generator().manual_seed(i) for i in range(R)]
    drafts = torch.stack(
        [S.draw(S.filtered_logprobs(a[:, i], hot), g) for i in range(K)], 1
    )
    assert torch.equal(drafts, a[:, :K].argmax(-1))
    mixed = drafts.clone()
    mixed[::2] = t[::2, :K].argmax(
        -1
    )  # rows where the verifier agrees, so bonuses happen too
    want = asymspec_step(a, b, t, mixed, cfg)
    got = S.sample_asymspec(a, b, t, mixed, hot, g)
    assert torch.equal(got.num_accepted, want.num_accepted) and torch.equal(
        got.token, want.token
    )
    t_agrees = (
        t.clone()
    )  # SD: drafts drawn from q = a; the verifier agrees with them on even rows
    t_agrees[::2, :K] += 100 * torch.nn.functional.one_hot(drafts[::2], V)
    sd_want = greedy_verify(t_agrees, drafts)
    sd_got = S.sample_sd(t_agrees, a[:, :K], drafts, hot, g)
    assert torch.equal(sd_got.num_accepted, sd_want.num_accepted) and torch.equal(
        sd_got.token, sd_want.token
    )
    assert 0 < int((sd_want.num_accepted == K).sum()) < R


def test_min_p_judges_the_tempered_and_banned_distribution():
    """vLLM's order: temperature, then min_p on those probabilities (with banned tokens already out)."""
    logits = torch.tensor([[2.0, 1.0, 0.0, 5.0]])
    banned = torch.tensor([False, False, False, True])
    kept = torch.isfinite(
        S.filtered_logprobs(logits, AsymSpecConfig(temperature=0.5, min_p=0.2), banned)
    )
    # at tau 0.5 without token 3: p = softmax([4, 2, 0]) = (0.867, 0.117, 0.016); 0.2 * 0.867 keeps token 0 only
    assert kept.tolist() == [[True, False, False, False]]
    kept = torch.isfinite(
        S.filtered_logprobs(logits, AsymSpecConfig(temperature=2.0, min_p=0.2), banned)
    )
    assert kept.tolist() == [
        [True, True, True, False]
    ]  # tau 2: softmax([1, .5, 0]) = (.51, .31, .19): all kept


def test_a_temperature_below_1e_5_decodes_greedily_as_vllm_does():
    for tau in (1e-40, 1e-300, 5e-6):
        assert not AsymSpecConfig(temperature=tau).samples
    assert AsymSpecConfig(temperature=1e-5).samples
