"""The row layout the gate kernels read (the decoding loop's and the vLLM sampler's) and its checks.

a, b, t [B, K+1, V]; drafts [B, K]; num_drafts [B] or None (= K). Request i owns positions 0..K of batch
row i; positions past num_drafts[i] are padding; the bonus position is num_drafts[i].
"""

from __future__ import annotations

import torch

from ..errors import InputError


def check_logits(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor, ndim: int) -> None:
    """a, b, t must be floating tensors of one shape with `ndim` dims, on one device."""
    for name, x in (("a", a), ("b", b), ("t", t)):
        if (
            not isinstance(x, torch.Tensor)
            or not x.is_floating_point()
            or x.dim() != ndim
        ):
            raise InputError(
                f"logits {name} must be a floating tensor with {ndim} dims, got "
                f"{getattr(x, 'dtype', type(x))} {tuple(getattr(x, 'shape', ()))}"
            )
    if not (a.shape == b.shape == t.shape):
        raise InputError(
            f"logits a, b, t differ in shape: {tuple(a.shape)}, {tuple(b.shape)}, {tuple(t.shape)}"
        )
    if not (a.device == b.device == t.device):
        raise InputError(
            f"logits a, b, t are on different devices: {a.device}, {b.device}, {t.device}"
        )
    if a.shape[-1] < 1:
        raise InputError("the vocabulary dimension of the logits is empty")


def check_banned(banned: torch.Tensor | None, vocab: int, device: torch.device) -> None:
    if banned is not None and (
        banned.dtype != torch.bool
        or banned.shape != (vocab,)
        or banned.device != device
    ):
        raise InputError(
            f"banned must be a bool tensor [{vocab}] on {device}, got {banned.dtype} "
            f"{tuple(banned.shape)} on {banned.device}"
        )


def check_padded(
    a, b, t, drafts: torch.Tensor, num_drafts: torch.Tensor | None, banned
) -> None:
    """Checks of the padded layout (shapes only: no device synchronisation)."""
    check_logits(a, b, t, 3)
    B, K1, V = a.shape
    if drafts.dtype not in (torch.int32, torch.int64) or drafts.shape != (B, K1 - 1):
        raise InputError(
            f"drafts must be int32/int64 [{B}, {K1 - 1}], got {drafts.dtype} {tuple(drafts.shape)}"
        )
    if num_drafts is not None and (
        num_drafts.dtype not in (torch.int32, torch.int64) or num_drafts.shape != (B,)
    ):
        raise InputError(
            f"num_drafts must be int32/int64 [{B}], got {num_drafts.dtype} {tuple(num_drafts.shape)}"
        )
    check_banned(banned, V, a.device)
