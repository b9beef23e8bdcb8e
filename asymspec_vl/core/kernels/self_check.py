"""The Triton gate kernel against the torch reference (gate.asymspec_step) on this machine's device, for every
gate, delta source and bonus rule: the check `asymspec-vl doctor` runs.

    python -m asymspec_vl.doctor.kernels self-check [--vocab 151936] [--dtype bfloat16] [--json]

On a CUDA device the compiled kernel runs; elsewhere it runs in triton's interpreter, which needs
TRITON_INTERPRET=1 in the environment before triton is imported (the doctor starts the check in a process
of its own for that).
"""

from __future__ import annotations

import itertools
import os

import torch

from .. import gate
from ..config import BONUS_RULES, DELTA_SOURCES, GATES, AsymSpecConfig
from ..limits import LIMITS


def random_step(seed: int, B: int, K: int, V: int, dtype: torch.dtype, device: str):
    """Logits a, b, t [B, K+1, V] where the verifier clearly accepts or rejects each draft (no decision
    rests on a rounding), drafts [B, K], per-row draft counts [B], a banned mask [V]."""
    g = torch.Generator().manual_seed(seed)
    a, b, t = (2 * torch.randn(B, K + 1, V, generator=g) for _ in range(3))
    drafts = torch.randint(0, V, (B, K), generator=g)
    rows, pos = torch.meshgrid(torch.arange(B), torch.arange(K), indexing="ij")
    t[rows, pos, drafts] = torch.where(torch.rand(B, K, generator=g) < 0.7, 25.0, -25.0)
    banned = torch.rand(V, generator=g) < 0.01
    num_drafts = torch.randint(0, K + 1, (B,), generator=g)
    return (
        a.to(device, dtype),
        b.to(device, dtype),
        t.to(device, dtype),
        drafts.to(device),
        num_drafts.to(device),
        banned.to(device),
    )


def self_check(
    device: str | None = None,
    dtype: str = "bfloat16",
    vocab: int = 151_936,
    batch: int = 4,
    K: int = LIMITS.speculative_tokens,
    reference: str | None = None,
) -> dict:
    """{"device", "dtype", "vocab", "reference", "cases", "mismatches": [case names]}: a case mismatches when the
    kernel's accepted counts or emitted tokens differ from the reference's. reference: the dtype the torch reference
    computes in ("float64": the same rounded inputs in double precision; None: the kernel's dtype)."""
    from .triton_gate import run_gate  # lazy: loads triton

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "the gate kernel on the CPU runs in triton's interpreter: set TRITON_INTERPRET=1"
        )
    mismatches, cases = [], 0
    for seed, (gate_name, delta, bonus) in enumerate(
        itertools.product(GATES, DELTA_SOURCES, BONUS_RULES)
    ):
        a, b, t, drafts, n, banned = random_step(
            seed, batch, K, vocab, getattr(torch, dtype), device
        )
        cfg = AsymSpecConfig(
            K=K, gate=gate_name, delta_source=delta, bonus=bonus, beta=1.0, gamma=0.5
        )
        ref_dtype = getattr(torch, reference) if reference else a.dtype
        ref = gate.asymspec_step(
            a.to(ref_dtype), b.to(ref_dtype), t.to(ref_dtype), drafts, cfg, banned, n
        )  # bf16 values are exact in float64: only the reference's arithmetic differs
        _, n_acc, token, _ = run_gate(
            a, b, t, drafts, n, cfg, banned, with_divergence=True
        )
        cases += 1
        if not (
            torch.equal(n_acc.long().cpu(), ref.num_accepted.cpu())
            and torch.equal(token.long().cpu(), ref.token.cpu())
        ):
            mismatches.append(f"gate={gate_name} delta={delta} bonus={bonus}")
    return {
        "device": device,
        "dtype": dtype,
        "vocab": vocab,
        "reference": reference or dtype,
        "cases": cases,
        "mismatches": mismatches,
    }
