"""Gate/fusion dispatch: the fused Triton kernel on CUDA tensors, the torch reference (gate.py) elsewhere.

asymspec_step  - same signature and result as gate.asymspec_step (padded [B, K+1, V] layout; the
                 transformers loop calls it).
asymspec_sample - vLLM's flattened layout (kernels/layout.py): committed tokens and counts per request.
The environment variable ASYMSPEC_GATE_BACKEND = auto (default) | torch | triton forces a path; "triton"
on CPU tensors needs TRITON_INTERPRET=1 set before triton is first imported.
"""

from __future__ import annotations

import os

import torch

from .. import gate
from ..config import AsymSpecConfig
from ..errors import ConfigError, InputError
from ..gate import StepOutcome
from .layout import (FlatOutcome, check_flat, check_padded, committed_tokens, flat_row_index,
                     num_drafts_from_cu)

BACKENDS = ("auto", "torch", "triton")


def backend_for(x: torch.Tensor) -> str:
    """"triton" for CUDA tensors (when triton imports), "torch" otherwise, unless the env var forces one."""
    forced = os.environ.get("ASYMSPEC_GATE_BACKEND", "auto")
    if forced not in BACKENDS:
        raise ConfigError(f"ASYMSPEC_GATE_BACKEND={forced!r} is invalid: expected one of {BACKENDS}")
    if forced == "triton" and not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError("ASYMSPEC_GATE_BACKEND=triton on CPU tensors needs TRITON_INTERPRET=1 "
                          "(set before triton is first imported)")
    if forced != "auto":
        return forced
    return "triton" if x.is_cuda and _triton_importable() else "torch"


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _check_tokens(ids: torch.Tensor, vocab: int, what: str) -> None:
    if ids.numel() and bool(((ids < 0) | (ids >= vocab)).any()):
        raise InputError(f"{what} holds token ids outside [0, {vocab})")


def asymspec_step(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor, drafts: torch.Tensor,
                  cfg: AsymSpecConfig, banned: torch.Tensor | None = None,
                  num_drafts: torch.Tensor | None = None) -> StepOutcome:
    """gate.asymspec_step on the fastest path for the tensors' device (same inputs, same StepOutcome)."""
    check_padded(a, b, t, drafts, num_drafts, banned)
    B, K1, V = t.shape
    _check_tokens(drafts, V, "drafts")
    if num_drafts is not None and num_drafts.numel() and bool(((num_drafts < 0) | (num_drafts >= K1)).any()):
        raise InputError(f"num_drafts must lie in [0, {K1 - 1}]")
    if backend_for(t) == "torch":
        return gate.asymspec_step(a, b, t, drafts, cfg, banned, num_drafts)
    from .triton_gate import run_gate

    _, n_acc, token, div = run_gate(a, b, t, drafts, num_drafts, cfg, banned, flat=False, num_reqs=B,
                                    out_len=K1 - 1, with_divergence=True)
    n_acc = n_acc.long()
    n_drafts = num_drafts.long() if num_drafts is not None else torch.full_like(n_acc, K1 - 1)
    return StepOutcome(n_acc, token.long(), n_acc == n_drafts, div.view(B, K1))


def asymspec_sample(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor, draft_token_ids: torch.Tensor,
                    cu_num_draft_tokens: torch.Tensor, max_spec_len: int, cfg: AsymSpecConfig,
                    banned: torch.Tensor | None = None, with_divergence: bool = False) -> FlatOutcome:
    """One AsymSpec step in vLLM's flattened layout (kernels/layout.py): a, b, t [num_tokens + num_reqs, V],
    draft_token_ids [num_tokens], cu_num_draft_tokens [num_reqs] -> FlatOutcome. with_divergence also
    returns D per row (computed anyway by the cda and kl gates)."""
    check_flat(a, b, t, draft_token_ids, cu_num_draft_tokens, max_spec_len, banned)
    V = t.shape[1]
    _check_tokens(draft_token_ids, V, "draft_token_ids")
    if backend_for(t) == "triton":
        from .triton_gate import run_gate

        token_ids, n_acc, _, div = run_gate(a, b, t, draft_token_ids, cu_num_draft_tokens, cfg, banned,
                                            flat=True, num_reqs=cu_num_draft_tokens.numel(),
                                            out_len=max_spec_len, with_divergence=with_divergence)
        return FlatOutcome(token_ids, n_acc, n_acc + 1, div)
    return _sample_torch(a, b, t, draft_token_ids, cu_num_draft_tokens, max_spec_len, cfg, banned,
                         with_divergence)


def _sample_torch(a, b, t, draft_token_ids, cu_num_draft_tokens, max_spec_len, cfg, banned,
                  with_divergence) -> FlatOutcome:
    """The torch path of asymspec_sample: gather the rows into the padded layout, run gate.asymspec_step."""
    rows, draft_idx = flat_row_index(cu_num_draft_tokens, max_spec_len)  # [N, S+1], [N, S]
    n = num_drafts_from_cu(cu_num_draft_tokens)  # [N]
    total = draft_token_ids.numel()
    if total:
        drafts = draft_token_ids.long()[draft_idx.clamp(max=total - 1)]  # [N, S]
    else:
        drafts = torch.zeros_like(draft_idx)
    out = gate.asymspec_step(a[rows], b[rows], t[rows], drafts, cfg, banned, num_drafts=n)
    token_ids = committed_tokens(drafts, out.num_accepted, out.token)
    n_acc = out.num_accepted.to(torch.int32)
    div = None
    if with_divergence:
        real = torch.arange(max_spec_len + 1, device=n.device).unsqueeze(0) <= n.unsqueeze(1)  # [N, S+1]
        div = torch.zeros(t.shape[0], dtype=torch.float32, device=t.device)
        div[rows[real]] = out.divergence[real]
    return FlatOutcome(token_ids, n_acc, n_acc + 1, div)
