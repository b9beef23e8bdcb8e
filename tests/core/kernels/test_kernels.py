"""The fused Triton gate kernels equal gate.asymspec_step (the torch reference); dispatch and the layout checks.

Without a GPU the kernels run in triton's interpreter (TRITON_INTERPRET=1, set in conftest.py); on a CUDA
machine the same tests run the compiled kernels."""

import itertools
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from asymspec_vl.core import gate
from asymspec_vl.core.config import BONUS_RULES, DELTA_SOURCES, GATES, AsymSpecConfig
from asymspec_vl.core.errors import ConfigError, InputError
from asymspec_vl.core.kernels import asymspec_step, backend_for
from asymspec_vl.core.kernels.triton_gate import run_gate

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
V_QWEN = 151_936  # Qwen3 / Qwen3-VL output vocabulary
NEG = float("-inf")
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Conversion of an array with ndim:DeprecationWarning"
    ),  # interpreter
    pytest.mark.usefixtures("one_torch_thread"),
]


@pytest.fixture
def triton_path(monkeypatch):
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "triton")


def make_case(
    seed,
    B,
    K,
    V,
    dtype=torch.float32,
    ties=False,
    neg_inf=0.0,
    banned_frac=0.0,
    mixed=True,
):
    """Random logits a, b, t [B, K+1, V] with clear-cut gate decisions, drafts [B, K], banned [V], num_drafts."""
    g = torch.Generator().manual_seed(seed)
    if ties:  # small integers: many exact argmax ties, exact fused sums for beta in {0, 0.5, 1, 2}
        a, b, t = (
            torch.randint(-3, 4, (B, K + 1, V), generator=g).float() for _ in range(3)
        )
    else:
        a, b, t = (2 * torch.randn(B, K + 1, V, generator=g) for _ in range(3))
    drafts = torch.randint(0, V, (B, K), generator=g)
    rows, pos = torch.meshgrid(torch.arange(B), torch.arange(K), indexing="ij")
    likely = (
        torch.rand(B, K, generator=g) < 0.7
    )  # the verifier strongly agrees (accept) or disagrees
    t[rows, pos, drafts] = torch.where(likely, 25.0, -25.0)
    if neg_inf:
        for x in (a, b, t):
            x[torch.rand(x.shape, generator=g) < neg_inf] = NEG
        both = (
            torch.rand(a.shape, generator=g) < neg_inf
        )  # a = b = -inf: delta NaN -> 0
        a[both] = NEG
        b[both] = NEG
    banned = None
    if banned_frac:
        banned = torch.rand(V, generator=g) < banned_frac
        banned[t[0, 0].argmax()] = True  # the verifier's favourite is banned somewhere
    num_drafts = torch.randint(0, K + 1, (B,), generator=g) if mixed else None

    def on(x):
        return None if x is None else x.to(DEVICE)

    return (
        a.to(dtype).to(DEVICE),
        b.to(dtype).to(DEVICE),
        t.to(dtype).to(DEVICE),
        drafts.to(DEVICE),
        on(banned),
        on(num_drafts),
    )


def assert_clear_margins(a, b, t, drafts, cfg):
    """The data must not put a gate decision within float round-off of its threshold."""
    la, lb, lt = (x.float().log_softmax(-1) for x in (a, b, t))
    div = gate.kl(la, lb) if cfg.gate == "kl" else gate.jsd(la, lb)
    idx, K = drafts.unsqueeze(-1), drafts.shape[1]
    margin = lt[:, :K].gather(-1, idx)[..., 0] - (
        gate.log_gamma_eff(cfg, la, lb, drafts, div) + lb[:, :K].gather(-1, idx)[..., 0]
    )
    close = margin.isfinite() & (margin.abs() < 1e-3)
    assert not close.any(), "test data too close to the gate threshold"


def assert_same(out, ref):
    assert torch.equal(out.num_accepted.cpu(), ref.num_accepted.cpu())
    assert torch.equal(out.token.cpu(), ref.token.cpu())
    assert torch.equal(out.is_bonus.cpu(), ref.is_bonus.cpu())
    if out.divergence is not None:
        torch.testing.assert_close(
            out.divergence.cpu(), ref.divergence.cpu(), atol=1e-5, rtol=1e-4
        )


def run_padded(
    a, b, t, drafts, cfg, banned, num_drafts, block=None, chunks=None, div=True
) -> gate.StepOutcome:
    """The kernels on the padded layout with explicit block / chunk sizes."""
    B, K1, _ = t.shape
    _, n_acc, token, D = run_gate(
        a,
        b,
        t,
        drafts,
        num_drafts,
        cfg,
        banned,
        with_divergence=div,
        block=block,
        chunks=chunks,
    )
    n = num_drafts if num_drafts is not None else torch.full_like(n_acc, K1 - 1)
    return gate.StepOutcome(
        n_acc.long(),
        token.long(),
        n_acc.long() == n.long(),
        None if D is None else D.view(B, K1),
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_full_qwen_vocab_each_dtype(dtype, triton_path):
    cfg = AsymSpecConfig(K=2)
    a, b, t, drafts, banned, n = make_case(
        1, 2, 2, V_QWEN, dtype, neg_inf=0.05, banned_frac=0.01
    )
    assert_clear_margins(a, b, t, drafts, cfg)
    out = asymspec_step(a, b, t, drafts, cfg, banned, n)
    assert_same(out, gate.asymspec_step(a, b, t, drafts, cfg, banned, n))
    assert 0 < int(out.num_accepted.sum()) and not bool(
        out.is_bonus.all()
    )  # both branches are exercised


def test_full_qwen_vocab_split_into_chunks():
    """Several chunks per row (the GPU's split): partial log-sum-exps and argmaxes combine exactly."""
    cfg = AsymSpecConfig(K=2, gate="kl", bonus="fused", beta=0.5)
    a, b, t, drafts, banned, n = make_case(
        2, 1, 2, V_QWEN, torch.bfloat16, ties=True, neg_inf=0.02
    )
    assert_clear_margins(a, b, t, drafts, cfg)
    out = run_padded(a, b, t, drafts, cfg, banned, n, block=8192, chunks=5)
    assert_same(out, gate.asymspec_step(a, b, t, drafts, cfg, banned, n))


# Every gate with every delta source; each gate meets both bonus rules, betas 0 / 0.5 / 1 / 2 and all dtypes.
GRID = list(
    itertools.product(("cda", "fixed", "lambda", "kl"), ("contrastive", "raw", "scd"))
)


@pytest.mark.parametrize("i", range(len(GRID)))
def test_every_gate_delta_source_and_bonus_rule(i):
    gate_name, source = GRID[i]
    bonus, beta = ("verifier", "fused")[i % 2], (0.0, 0.5, 1.0, 2.0)[i % 4]
    dtype = (torch.float32, torch.bfloat16, torch.float16)[(i + i // 3) % 3]
    cfg = AsymSpecConfig(
        K=3, gate=gate_name, delta_source=source, bonus=bonus, beta=beta, lam=0.5
    )
    a, b, t, drafts, banned, n = make_case(
        100 + i, 3, 3, 300, dtype, ties=True, neg_inf=0.1, banned_frac=0.05
    )
    assert_clear_margins(a, b, t, drafts, cfg)
    ref = gate.asymspec_step(a, b, t, drafts, cfg, banned, n)
    assert_same(
        run_padded(a, b, t, drafts, cfg, banned, n, block=128, chunks=2), ref
    )  # 3 blocks, 2 chunks


def test_batch_64_with_8_drafts_of_mixed_lengths():
    cfg = AsymSpecConfig(
        K=8, gate="lambda", lam=0.2
    )  # no divergence pass: keeps the interpreter quick
    a, b, t, drafts, banned, n = make_case(
        7, 64, 8, 40, torch.float16, ties=True, neg_inf=0.1, banned_frac=0.1
    )
    assert {0, 8} <= set(n.tolist())
    assert_clear_margins(a, b, t, drafts, cfg)
    ref = gate.asymspec_step(a, b, t, drafts, cfg, banned, n)
    assert_same(run_padded(a, b, t, drafts, cfg, banned, n, div=False), ref)
    assert len(set(ref.num_accepted.tolist())) > 3  # many different accepted lengths


def test_ties_break_toward_the_lowest_token_id_across_blocks_and_chunks():
    V, K = 300, 1
    a, b, t = (torch.zeros(1, K + 1, V, device=DEVICE) for _ in range(3))
    t[0, :, [170, 70, 250]] = (
        5.0  # equal maxima in different chunks (block 64, 3 chunks of 128)
    )
    t[0, 0, 3] = -5.0
    drafts = torch.tensor(
        [[3]], device=DEVICE
    )  # p_t(3) is tiny: rejected at position 0
    cfg = AsymSpecConfig(K=K, beta=1.0)
    banned = torch.zeros(V, dtype=torch.bool, device=DEVICE)
    for ban, expected in (((), 70), ((70,), 170), ((70, 170), 250)):
        banned[list(ban)] = True
        out = run_padded(
            a, b, t, drafts, cfg, banned if ban else None, None, block=64, chunks=3
        )
        assert (int(out.num_accepted), int(out.token)) == (0, expected)
        assert_same(
            out, gate.asymspec_step(a, b, t, drafts, cfg, banned if ban else None)
        )


def test_infinite_logits_follow_the_reference_rules():
    """delta = -inf - -inf counts as 0; t = -inf with delta = +inf gives -inf, not NaN; beta = 0 is t."""
    V = 50
    a, b, t = (torch.zeros(1, 2, V, device=DEVICE) for _ in range(3))
    t[0, 0, 7] = 3.0
    a[0, 0, 7] = b[0, 0, 7] = NEG  # delta NaN -> 0: token 7 keeps t = 3
    t[0, 0, 9], b[0, 0, 9] = NEG, NEG  # with a finite: delta = +inf, fused NaN -> -inf
    a[0, 0, 11] = 2.9  # delta 2.9 at 11: fused 2.9 < 3
    drafts = torch.tensor([[1]], device=DEVICE)
    t[0, 0, 1] = NEG  # the draft is impossible for the verifier: rejected
    for beta, expected in ((1.0, 7), (0.0, 7), (2.0, 11)):
        cfg = AsymSpecConfig(K=1, beta=beta)
        ref = gate.asymspec_step(a, b, t, drafts, cfg)
        out = run_padded(a, b, t, drafts, cfg, None, None)
        assert int(ref.token) == expected
        assert_same(out, ref)
    # lambda gate, Delta = log p_a(d) - log p_b(d) = +-inf: clipped to the float32 range like nan_to_num,
    # so lam = 0 leaves gamma (0 * inf would be NaN and reject)
    b[0, 0, 1], t[0, 0, 1] = (
        NEG,
        0.0,
    )  # p_b(1) = 0 < p_t(1): Delta = +inf, accepted by every lam
    a[0, 0, 2] = NEG  # p_a(2) = 0 < p_b(2): Delta = -inf, rejected unless lam = 0
    for draft, lam, accepted in ((1, 0.0, 1), (1, 1.0, 1), (2, 0.0, 1), (2, 0.5, 0)):
        cfg = AsymSpecConfig(K=1, gate="lambda", lam=lam, gamma=1e-3)
        d = torch.tensor([[draft]], device=DEVICE)
        ref = gate.asymspec_step(a, b, t, d, cfg)
        assert int(ref.num_accepted) == accepted
        assert_same(run_padded(a, b, t, d, cfg, None, None), ref)


def test_hand_computed_five_token_cases_and_an_exact_threshold_tie(triton_path):
    """The 5-token case of test_gate.py (every gate, delta source, bonus rule) and p_t(d) = gamma * p_b(d)."""
    p_a, p_b = [0.7, 0.1, 0.1, 0.05, 0.05], [0.2] * 5
    p_t, p_t_bonus = [0.09, 0.6, 0.11, 0.1, 0.1], [0.1, 0.1, 0.1, 0.6, 0.1]

    def logp(*rows):
        return torch.tensor([[math.log(x) for x in r] for r in rows], device=DEVICE)[
            None
        ]

    a, b, t = logp(p_a, p_a), logp(p_b, p_b), logp(p_t, p_t_bonus)
    drafts = torch.tensor([[0]], device=DEVICE)
    outcomes = set()
    for i, (gate_name, source, bonus) in enumerate(
        itertools.product(GATES, DELTA_SOURCES, BONUS_RULES)
    ):
        cfg = AsymSpecConfig(
            K=1,
            gate=gate_name,
            delta_source=source,
            bonus=bonus,
            beta=(0.5, 1.0, 2.0)[i % 3],
            lam=1.0,
        )
        out = asymspec_step(a, b, t, drafts, cfg)
        assert_same(out, gate.asymspec_step(a, b, t, drafts, cfg))
        outcomes.add((int(out.num_accepted), int(out.token)))
    assert len(outcomes) >= 3  # accepted + bonus 3 or 0, rejected + fused 0 or 1
    zeros = torch.zeros(
        1, 2, 5, device=DEVICE
    )  # p_t(4) = p_b(4) and gamma = 1: 0.2 > 0.2 is false
    cfg = AsymSpecConfig(K=1, gate="fixed", gamma=1.0)
    for banned, token in (
        (None, 0),
        (torch.tensor([True, True, False, False, False], device=DEVICE), 2),
    ):
        out = asymspec_step(
            zeros, zeros, zeros, torch.tensor([[4]], device=DEVICE), cfg, banned
        )
        assert (int(out.num_accepted), int(out.token)) == (0, token)


def test_dispatch_picks_by_device(monkeypatch):
    monkeypatch.delenv("ASYMSPEC_GATE_BACKEND", raising=False)
    assert backend_for(torch.zeros(1)) == "torch"
    if torch.cuda.is_available():
        assert backend_for(torch.zeros(1, device="cuda")) == "triton"
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "triton")
    monkeypatch.setenv(
        "TRITON_INTERPRET", "1"
    )  # only the env var is read here (triton is imported already)
    assert backend_for(torch.zeros(1)) == "triton"
    monkeypatch.delenv(
        "TRITON_INTERPRET"
    )  # the compiled kernels cannot read CPU memory
    with pytest.raises(ConfigError, match="TRITON_INTERPRET"):
        backend_for(torch.zeros(1))
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "cuda")
    with pytest.raises(ConfigError, match="ASYMSPEC_GATE_BACKEND"):
        backend_for(torch.zeros(1))


def test_bad_inputs_raise_typed_errors():
    cfg = AsymSpecConfig(K=2)
    a, b, t, drafts, _, _ = make_case(9, 2, 2, 20, mixed=False)
    with pytest.raises(InputError, match="shape"):
        asymspec_step(a, b, t[:, :, :10], drafts, cfg)
    with pytest.raises(InputError, match="drafts"):
        asymspec_step(a, b, t, drafts[:, :1], cfg)
    with pytest.raises(InputError, match="outside"):
        asymspec_step(a, b, t, drafts + 20, cfg)
    with pytest.raises(InputError, match="banned"):
        asymspec_step(a, b, t, drafts, cfg, banned=torch.zeros(20, device=DEVICE))
    with pytest.raises(InputError, match="num_drafts"):
        asymspec_step(
            a, b, t, drafts, cfg, num_drafts=torch.tensor([1, 3], device=DEVICE)
        )


def test_every_kernel_variant_compiles_for_a_cuda_gpu():
    """The interpreter is lenient: the kernels must also compile (Triton -> PTX -> cubin) for sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "asymspec_vl.doctor.kernels", "compile", "--arch", "90"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"compiled \d+ kernel variants for sm_90", proc.stdout)


def test_gate_benchmark_prints_and_writes_its_table(capsys, tmp_path):
    from asymspec_vl.evals.benchmarks import bench_gate

    bench_gate.main(
        [
            "--device",
            DEVICE,
            "--vocab",
            "512",
            "--shapes",
            "1x2",
            "--repeat",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "| torch | 1 | 2 |" in out and "| triton" in out
    assert {p.name for p in tmp_path.iterdir()} == {
        "bench_gate.md",
        "bench_gate.csv",
        "bench_gate.json",
    }
