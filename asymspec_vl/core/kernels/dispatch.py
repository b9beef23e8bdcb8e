"""Gate/fusion dispatch: the fused Triton kernel on CUDA tensors, the torch reference (gate.py) elsewhere.

asymspec_step has the signature and result of gate.asymspec_step (the [B, K+1, V] layout of core/kernels/layout.py);
decide_asymspec, AsymSpec's rule, which the decoding loop and the vLLM sampler both call (methods.py), goes through
it. Imports run one way: this module reads gate.py (the reference), gate.py reads nothing here. The environment
variable ASYMSPEC_GATE_BACKEND = auto (default) | torch | triton forces a path; "triton" on CPU tensors needs
TRITON_INTERPRET=1 set before triton is first imported.
"""

from __future__ import annotations

import os

import torch

from .. import gate
from ..config import AsymSpecConfig
from ..errors import ConfigError, InputError
from ..gate import StepOutcome
from .layout import check_padded

BACKENDS = ("auto", "torch", "triton")


def backend_for(x: torch.Tensor) -> str:
    """ "triton" for CUDA tensors (when triton imports), "torch" otherwise, unless the env var forces one."""
    forced = os.environ.get("ASYMSPEC_GATE_BACKEND", "auto")
    if forced not in BACKENDS:
        raise ConfigError(
            f"ASYMSPEC_GATE_BACKEND={forced!r} is invalid: expected one of {BACKENDS}"
        )
    if (
        forced == "triton"
        and not x.is_cuda
        and os.environ.get("TRITON_INTERPRET") != "1"
    ):
        raise ConfigError(
            "ASYMSPEC_GATE_BACKEND=triton on CPU tensors needs TRITON_INTERPRET=1 "
            "(set before triton is first imported)"
        )
    if forced != "auto":
        return forced
    return "triton" if x.is_cuda and _triton_importable() else "torch"


def _triton_importable() -> bool:
    try:
        # lazy: optional (triton may be absent: the except branch answers)
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _check_tokens(ids: torch.Tensor, vocab: int, what: str) -> None:
    if ids.numel() and bool(((ids < 0) | (ids >= vocab)).any()):
        raise InputError(f"{what} holds token ids outside [0, {vocab})")


def asymspec_step(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None = None,
    num_drafts: torch.Tensor | None = None,
) -> StepOutcome:
    """gate.asymspec_step on the fastest path for the tensors' device (same inputs, same StepOutcome)."""
    check_padded(a, b, t, drafts, num_drafts, banned)
    B, K1, V = t.shape
    _check_tokens(drafts, V, "drafts")
    if (
        num_drafts is not None
        and num_drafts.numel()
        and bool(((num_drafts < 0) | (num_drafts >= K1)).any())
    ):
        raise InputError(f"num_drafts must lie in [0, {K1 - 1}]")
    if backend_for(t) == "torch":
        return gate.asymspec_step(a, b, t, drafts, cfg, banned, num_drafts)
    from .triton_gate import run_gate  # lazy: loads triton

    _, n_acc, token, div = run_gate(
        a, b, t, drafts, num_drafts, cfg, banned, with_divergence=True
    )
    n_acc = n_acc.long()
    n_drafts = (
        num_drafts.long() if num_drafts is not None else torch.full_like(n_acc, K1 - 1)
    )
    return StepOutcome(n_acc, token.long(), n_acc == n_drafts, div.view(B, K1))


def decide_asymspec(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None = None,
) -> StepOutcome:
    """AsymSpec's rule: the CDA gate, δ-fusion at the first rejection, the bonus after K accepts.
    a: [B, K or K+1, V] (a_{K+1} is drafted only for a fused bonus: the verifier's bonus argmax(t_{K+1}) never
    reads it, so b_{K+1} stands in, delta_{K+1} = 0); b, t: [B, K+1, V]; drafts: [B, K]. On CUDA tensors the
    fused Triton kernel decides, elsewhere gate.asymspec_step (the reference)."""
    if a.shape[1] == drafts.shape[1]:
        a = torch.cat([a, b[:, -1:]], dim=1)
    return asymspec_step(a, b, t, drafts, cfg, banned)
