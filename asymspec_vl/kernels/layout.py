"""The two row layouts the gate kernels read (padded [B, K+1, V] and vLLM's flattened one) and their checks.

Padded layout (the transformers loop, gate.asymspec_step):
  a, b, t [B, K+1, V]; drafts [B, K]; num_drafts [B] or None (= K). Request i owns positions 0..K of
  batch row i; positions past num_drafts[i] are padding; the bonus position is num_drafts[i].

Flattened layout (vLLM v1 spec decode, SpecDecodeMetadata / RejectionSampler.forward):
  a, b, t [num_draft_tokens_total + num_reqs, V]: request i owns the n_i + 1 consecutive rows starting at
    row_start(i) = cu_num_draft_tokens[i] - n_i + i: its n_i draft positions, then its bonus position
    (the rows `logits_indices` selects from the model output; bonus_logits_indices = row_start(i) + n_i).
  draft_token_ids [num_draft_tokens_total]: request i's drafts at cu_num_draft_tokens[i] - n_i ... - 1.
  cu_num_draft_tokens [num_reqs] int32: inclusive cumulative sums of n_i (vLLM's convention); n_i may be 0.
  Output (FlatOutcome.token_ids) [num_reqs, max_spec_len + 1] int32 like the rejection sampler's
    output_token_ids: the accepted drafts, then the emitted token, then PLACEHOLDER_TOKEN_ID (-1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError

PLACEHOLDER_TOKEN_ID = -1  # vLLM's rejection sampler pads output_token_ids with it


@dataclass
class FlatOutcome:
    """What one speculation step commits per request, in vLLM's output layout."""

    token_ids: torch.Tensor  # [num_reqs, max_spec_len + 1] int32, PLACEHOLDER_TOKEN_ID past the committed
    num_accepted: torch.Tensor  # [num_reqs] int32: leading drafts accepted
    num_committed: torch.Tensor  # [num_reqs] int32: num_accepted + 1
    divergence: torch.Tensor | None = None  # [num_rows] float32: D of every row (None when not computed)


def check_logits(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor, ndim: int) -> None:
    """a, b, t must be floating tensors of one shape with `ndim` dims, on one device."""
    for name, x in (("a", a), ("b", b), ("t", t)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != ndim:
            raise InputError(f"logits {name} must be a floating tensor with {ndim} dims, got "
                             f"{getattr(x, 'dtype', type(x))} {tuple(getattr(x, 'shape', ()))}")
    if not (a.shape == b.shape == t.shape):
        raise InputError(f"logits a, b, t differ in shape: {tuple(a.shape)}, {tuple(b.shape)}, {tuple(t.shape)}")
    if not (a.device == b.device == t.device):
        raise InputError(f"logits a, b, t are on different devices: {a.device}, {b.device}, {t.device}")
    if a.shape[-1] < 1:
        raise InputError("the vocabulary dimension of the logits is empty")


def check_banned(banned: torch.Tensor | None, vocab: int, device: torch.device) -> None:
    if banned is not None and (banned.dtype != torch.bool or banned.shape != (vocab,) or banned.device != device):
        raise InputError(f"banned must be a bool tensor [{vocab}] on {device}, got {banned.dtype} "
                         f"{tuple(banned.shape)} on {banned.device}")


def check_padded(a, b, t, drafts: torch.Tensor, num_drafts: torch.Tensor | None, banned) -> None:
    """Checks of the padded layout (shapes only: no device synchronisation)."""
    check_logits(a, b, t, 3)
    B, K1, V = a.shape
    if drafts.dtype not in (torch.int32, torch.int64) or drafts.shape != (B, K1 - 1):
        raise InputError(f"drafts must be int32/int64 [{B}, {K1 - 1}], got {drafts.dtype} {tuple(drafts.shape)}")
    if num_drafts is not None and (num_drafts.dtype not in (torch.int32, torch.int64) or num_drafts.shape != (B,)):
        raise InputError(f"num_drafts must be int32/int64 [{B}], got {num_drafts.dtype} {tuple(num_drafts.shape)}")
    check_banned(banned, V, a.device)


def check_flat(a, b, t, draft_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
               max_spec_len: int, banned) -> None:
    """Checks of the flattened layout. Reads cu_num_draft_tokens (a device sync on GPU; it is tiny)."""
    check_logits(a, b, t, 2)
    if cu_num_draft_tokens.dim() != 1 or cu_num_draft_tokens.dtype not in (torch.int32, torch.int64):
        raise InputError("cu_num_draft_tokens must be a 1-D int32/int64 tensor")
    if draft_token_ids.dim() != 1 or draft_token_ids.dtype not in (torch.int32, torch.int64):
        raise InputError("draft_token_ids must be a 1-D int32/int64 tensor")
    num_reqs, total = cu_num_draft_tokens.numel(), draft_token_ids.numel()
    n = num_drafts_from_cu(cu_num_draft_tokens)
    if num_reqs == 0 or bool((n < 0).any()) or int(cu_num_draft_tokens[-1]) != total:
        raise InputError(f"cu_num_draft_tokens must be non-decreasing and end at {total} (the number of drafts)")
    if a.shape[0] != total + num_reqs:
        raise InputError(f"flattened logits need {total} + {num_reqs} rows (drafts + one bonus per request), "
                         f"got {a.shape[0]}")
    if not isinstance(max_spec_len, int) or max_spec_len < int(n.max()):
        raise InputError(f"max_spec_len={max_spec_len!r} is below the largest draft count {int(n.max())}")
    check_banned(banned, a.shape[1], a.device)


def num_drafts_from_cu(cu_num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """n_i from the inclusive cumulative sums. [num_reqs] -> [num_reqs] int64."""
    cu = cu_num_draft_tokens.long()
    return cu - torch.cat([cu.new_zeros(1), cu[:-1]])


def flat_row_index(cu_num_draft_tokens: torch.Tensor, max_spec_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flattened rows of each request's padded positions 0..max_spec_len (padding repeats the bonus row)
    and flat draft indices of positions 0..max_spec_len-1 (padding repeats the request's first slot).
    -> rows [num_reqs, max_spec_len + 1], draft_idx [num_reqs, max_spec_len], both int64."""
    n = num_drafts_from_cu(cu_num_draft_tokens)
    start = cu_num_draft_tokens.long() - n  # [num_reqs] first draft of each request
    req = torch.arange(n.numel(), device=n.device)
    pos = torch.arange(max_spec_len + 1, device=n.device)
    rows = (start + req).unsqueeze(1) + torch.minimum(pos.unsqueeze(0), n.unsqueeze(1))
    draft_idx = start.unsqueeze(1) + torch.minimum(pos[:-1].unsqueeze(0), (n - 1).clamp_min(0).unsqueeze(1))
    return rows, draft_idx


def committed_tokens(drafts: torch.Tensor, num_accepted: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """vLLM's output layout from a padded outcome. drafts [N, S], num_accepted [N], token [N]
    -> [N, S + 1] int32: drafts before num_accepted, token at num_accepted, PLACEHOLDER_TOKEN_ID after."""
    N, S = drafts.shape
    pos = torch.arange(S + 1, device=drafts.device).unsqueeze(0)
    padded = torch.cat([drafts, drafts.new_zeros(N, 1)], dim=1).long()
    n = num_accepted.long().unsqueeze(1)
    out = torch.where(pos < n, padded, torch.where(pos == n, token.long().unsqueeze(1), PLACEHOLDER_TOKEN_ID))
    return out.to(torch.int32)
