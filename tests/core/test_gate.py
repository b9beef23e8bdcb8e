"""The per-step math on hand-computed 5-token cases, edge cases (ties, -inf, banned) and random properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.gate import LN2, asymspec_step, greedy_verify, jsd, kl, scd_scores

# One draft (K = 1), vocabulary of 5. Position 1 is the draft position, position 2 the bonus position.
P_A = [0.7, 0.1, 0.1, 0.05, 0.05]  # drafter on x_full: confident in token 0
P_B = [0.2, 0.2, 0.2, 0.2, 0.2]  # drafter on x_comp: no idea
P_T = [0.09, 0.6, 0.11, 0.1, 0.1]  # verifier on x_comp: prefers token 1, p_t(0) = 0.09
P_T_BONUS = [0.1, 0.1, 0.1, 0.6, 0.1]


def ref_jsd(p, q):
    m = [(x + y) / 2 for x, y in zip(p, q)]
    return 0.5 * sum(x * math.log(x / z) for x, z in zip(p, m) if x > 0) + 0.5 * sum(
        y * math.log(y / z) for y, z in zip(q, m) if y > 0
    )


def ref_kl(p, q):
    return sum(x * math.log(x / y) for x, y in zip(p, q) if x > 0)


def logits(*rows):
    return torch.tensor([[math.log(x) for x in r] for r in rows])[None]  # [1, K+1, 5]


def step(
    gate="cda",
    p_t=P_T,
    beta=1.0,
    gamma=0.5,
    source="contrastive",
    bonus="verifier",
    draft=0,
    lam=0.1,
):
    cfg = AsymSpecConfig(
        K=1,
        beta=beta,
        gamma=gamma,
        gate=gate,
        delta_source=source,
        bonus=bonus,
        lam=lam,
    )
    a, b, t = logits(P_A, P_A), logits(P_B, P_B), logits(p_t, P_T_BONUS)
    return asymspec_step(a, b, t, torch.tensor([[draft]]), cfg)


def test_hand_computed_divergences():
    D = ref_jsd(P_A, P_B)  # 0.2367 nats
    out = step()
    assert out.divergence[0, 0].item() == pytest.approx(D, abs=1e-6)
    assert step(gate="kl").divergence[0, 0].item() == pytest.approx(
        ref_kl(P_A, P_B), abs=1e-6
    )


def test_each_gate_on_a_hand_computed_case():
    # accept iff p_t(d) > gamma_eff * p_b(d) = gamma_eff * 0.2, with p_t(d) = 0.09
    D, KL = ref_jsd(P_A, P_B), ref_kl(P_A, P_B)
    assert 0.5 * 0.2 > 0.09 > 0.5 * math.exp(-D) * 0.2  # so: fixed rejects, CDA accepts
    assert not bool(step(gate="fixed").num_accepted[0])
    assert bool(step(gate="cda").num_accepted[0])
    assert 0.5 * math.exp(-KL) * 0.2 < 0.09  # KL gate relaxes more than JSD here
    assert bool(step(gate="kl").num_accepted[0])
    delta = math.log(0.7) - math.log(0.2)  # lambda gate: gamma * exp(-lam * Delta)
    assert 0.5 * math.exp(-0.05 * delta) * 0.2 > 0.09  # lam = 0.05 is not enough ...
    assert not bool(step(gate="lambda", lam=0.05).num_accepted[0])
    assert 0.5 * math.exp(-1.0 * delta) * 0.2 < 0.09  # ... lam = 1 is
    assert bool(step(gate="lambda", lam=1.0).num_accepted[0])


def test_fused_token_at_rejection_for_each_delta_source():
    # fixed gate rejects the draft; the emitted token is argmax(t + beta * delta) at position 1
    p = lambda i, scale: P_T[i] * (P_A[i] / P_B[i]) ** scale  # noqa: E731  exp(t + beta (a - b)) up to a constant
    assert (
        max(range(5), key=lambda i: p(i, 0.5)) == 1
    )  # 0.09 * 3.5^0.5 = 0.168 < 0.6 * 0.5^0.5 = 0.424
    assert int(step(gate="fixed", beta=0.5).token[0]) == 1
    assert (
        max(range(5), key=lambda i: p(i, 1.0)) == 0
    )  # 0.09 * 3.5 = 0.315 > 0.6 * 0.5 = 0.3
    out = step(gate="fixed", beta=1.0)
    assert (int(out.token[0]), bool(out.is_bonus[0]), int(out.num_accepted[0])) == (
        0,
        False,
        0,
    )
    assert (
        int(step(gate="fixed", beta=0.0).token[0]) == 1
    )  # beta = 0: the verifier's argmax
    # raw: t + beta a -> beta 1: 0.09*0.7 = 0.063 > 0.6*0.1 = 0.06: token 0; beta 0.5: 0.075 < 0.19: token 1
    assert int(step(gate="fixed", source="raw", beta=1.0).token[0]) == 0
    assert int(step(gate="fixed", source="raw", beta=0.5).token[0]) == 1
    # scd: t + beta (t - b) = (1 + beta) t - beta b, b uniform: the verifier's argmax whatever beta
    assert int(step(gate="fixed", source="scd", beta=2.0).token[0]) == 1


def test_bonus_rules_when_every_draft_passes():
    out = step(gate="cda")
    assert bool(out.is_bonus[0]) and int(out.num_accepted[0]) == 1
    assert int(out.token[0]) == 3  # argmax t_{K+1}
    assert out.committed(torch.tensor([[0]])) == [[0, 3]]
    # fused bonus: argmax(t_2 + 2 (a_2 - b_2)): 0.1 * 3.5^2 = 1.225 > 0.6 * 0.25^2 -> token 0
    assert int(step(gate="cda", beta=2.0, bonus="fused").token[0]) == 0
    assert int(step(gate="cda", beta=2.0, bonus="verifier").token[0]) == 3


def test_ties_break_to_lowest_id_and_banned_tokens_are_skipped():
    t = torch.zeros(1, 2, 5)  # all tied
    a = b = torch.zeros(1, 2, 5)
    cfg = AsymSpecConfig(K=1, gate="fixed", gamma=1.0)
    out = asymspec_step(
        a, b, t, torch.tensor([[4]]), cfg
    )  # p_t = p_b: 0.2 > 0.2 is false -> reject
    assert int(out.num_accepted[0]) == 0 and int(out.token[0]) == 0
    banned = torch.tensor([True, True, False, False, False])
    assert int(asymspec_step(a, b, t, torch.tensor([[4]]), cfg, banned).token[0]) == 2


def test_minus_inf_logits_are_handled():
    ninf = float("-inf")
    a = torch.tensor([[[2.0, ninf, 0.0, ninf, 1.0], [0.0, 0.0, ninf, ninf, 0.0]]])
    b = torch.tensor([[[ninf, ninf, 0.0, 1.0, 1.0], [0.0, ninf, ninf, ninf, 0.0]]])
    t = torch.tensor([[[0.0, 1.0, ninf, 0.0, 0.5], [ninf, 3.0, 0.0, ninf, 1.0]]])
    for gate in ("cda", "fixed", "lambda", "kl"):
        out = asymspec_step(
            a, b, t, torch.tensor([[0]]), AsymSpecConfig(K=1, gate=gate)
        )
        assert not torch.isnan(
            out.divergence[:, :1]
        ).any() and out.token.item() in range(5)
    out = asymspec_step(
        a, b, t, torch.tensor([[2]]), AsymSpecConfig(K=1, gate="fixed", beta=1.0)
    )
    # draft 2 has p_t = 0 -> rejected; delta_0 = +inf (b = -inf, a finite) and t_0 finite -> token 0
    assert int(out.num_accepted[0]) == 0 and int(out.token[0]) == 0
    # draft 0 has p_b = 0 < p_t: accepted by every gate
    assert (
        int(
            asymspec_step(
                a, b, t, torch.tensor([[0]]), AsymSpecConfig(K=1)
            ).num_accepted[0]
        )
        == 1
    )


def test_num_drafts_moves_the_bonus_position():
    g = torch.Generator().manual_seed(0)
    a, b, t = (torch.randn(2, 4, 7, generator=g) for _ in range(3))
    drafts = t[:, :3].argmax(
        -1
    )  # drafts the verifier agrees with: all pass a low gamma
    cfg = AsymSpecConfig(K=3, gamma=0.01, bonus="verifier")
    out = asymspec_step(a, b, t, drafts, cfg, num_drafts=torch.tensor([3, 1]))
    assert out.num_accepted.tolist() == [3, 1] and out.is_bonus.tolist() == [True, True]
    assert out.token.tolist() == [int(t[0, 3].argmax()), int(t[1, 1].argmax())]


def test_greedy_verify_and_scd_scores():
    t = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])
    out = greedy_verify(t, torch.tensor([[1, 1]]))  # d_1 = argmax, d_2 != argmax (0)
    assert out.committed(torch.tensor([[1, 1]])) == [[1, 0]] and not bool(
        out.is_bonus[0]
    )
    out = greedy_verify(t, torch.tensor([[1, 0]]))
    assert out.committed(torch.tensor([[1, 0]])) == [[1, 0, 2]] and bool(
        out.is_bonus[0]
    )
    # SCD: expert prefers 0 slightly, amateur strongly -> contrast picks 1; 2 is implausible (alpha cut)
    lt = torch.log(torch.tensor([0.45, 0.40, 0.15]))
    lb = torch.log(torch.tensor([0.80, 0.10, 0.10]))
    s = scd_scores(lt, lb, beta=1.0, alpha=0.5)
    assert s[2] == float("-inf") and int(s.argmax()) == 1
    expected = 2 * math.log(0.40) - math.log(0.10)
    assert s[1].item() == pytest.approx(expected, abs=1e-5)


def test_scd_at_alpha_one_keeps_only_the_verifier_argmax():
    """alpha = 1 (the largest the config allows): the plausible set is {log p_t = max log p_t}, so exactly
    one token per position stays finite, the verifier's argmax, whatever the amateur says."""
    g = torch.Generator().manual_seed(0)
    t, b = (
        torch.randn(3, 5, 50, generator=g) * 4,
        torch.randn(3, 5, 50, generator=g) * 4,
    )  # [B, K+1, V]
    s = scd_scores(t, b, beta=1.0, alpha=1.0)
    assert torch.isfinite(s).sum(-1).eq(1).all()
    assert torch.equal(s.argmax(-1), t.argmax(-1))


finite = st.floats(min_value=-30, max_value=30, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(2, 40),
    st.integers(0, 2**31 - 1),
    st.floats(min_value=0.1, max_value=20),
    st.floats(min_value=0.01, max_value=1.0),
)
def test_jsd_and_gamma_eff_bounds(B, K, V, seed, scale, gamma):
    g = torch.Generator().manual_seed(seed)
    a, b, t = (torch.randn(B, K + 1, V, generator=g) * scale for _ in range(3))
    D = jsd(a.log_softmax(-1), b.log_softmax(-1))
    assert (D >= 0).all() and (D <= LN2).all()
    gamma_eff = gamma * torch.exp(-D)
    assert (gamma_eff >= gamma / 2 - 1e-7).all() and (gamma_eff <= gamma).all()
    assert (kl(a.log_softmax(-1), b.log_softmax(-1)) >= 0).all()
    out = asymspec_step(
        a,
        b,
        t,
        torch.randint(0, V, (B, K), generator=g),
        AsymSpecConfig(K=K, gamma=gamma),
    )
    assert ((out.num_accepted >= 0) & (out.num_accepted <= K)).all()
    assert ((out.token >= 0) & (out.token < V)).all()
    assert torch.equal(out.is_bonus, out.num_accepted == K)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_reduce_in_float32(dtype):
    g = torch.Generator().manual_seed(1)
    a, b, t = (torch.randn(2, 3, 1000, generator=g) * 4 for _ in range(3))
    drafts = torch.randint(0, 1000, (2, 2), generator=g)
    cfg = AsymSpecConfig(K=2)
    low = asymspec_step(a.to(dtype), b.to(dtype), t.to(dtype), drafts, cfg)
    ref = asymspec_step(
        a.to(dtype).float(), b.to(dtype).float(), t.to(dtype).float(), drafts, cfg
    )
    assert low.divergence.dtype == torch.float32
    assert torch.equal(low.token, ref.token) and torch.equal(
        low.num_accepted, ref.num_accepted
    )
