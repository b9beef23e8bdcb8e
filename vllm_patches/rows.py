"""Per-request state of an asymspec engine, on the worker: parsed inputs, the x_full ledger, last drafts."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from asymspec_vl.sources import RowLedger

from .request_args import AsymSpecArgs

PRIME_KEY = "asymspec_prime"  # set by the scheduler patch: the prompt token it moved to the output


@dataclass
class RowState:
    """args None: a plain speculative-decoding request (no extra_args["asymspec"]).

    reemit: a preempted request resumes with a prefill of everything but its last output token (the scheduler
    holds that token back); the resumed prefill emits it again instead of a sample, so the step after it
    drafts and verifies as Algorithm 1 would have, and the client never sees it twice."""

    args: AsymSpecArgs | None
    prime: int | None = None  # x_comp's last token, emitted by the first step instead of a sample
    reemit: tuple[int, int] | None = None  # (token, outputs before it): see above
    failed: str | None = None  # "ErrorType: message" once the request cannot be served
    banned: torch.Tensor | None = None  # [V] bool
    banned_ids: tuple[int, ...] = ()  # the ids set in `banned` (groups rows that share a mask)
    full: RowLedger | None = None  # the drafter's x_full view (mode asymspec)
    full_positions: torch.Tensor | None = None  # [3, P] or [P] rope positions of the x_full prompt
    delta: int = 0  # M-RoPE delta of the x_full prompt
    sees_image: bool = False
    drafts: list[int] = field(default_factory=list)  # the last proposal
    a: torch.Tensor | None = None  # [len(drafts) (+1), V] drafter logits on x_full at the draft positions

    @property
    def mode(self) -> str:
        return self.args.mode if self.args is not None else "plain"

    def committed(self, output_token_ids: list[int]) -> list[int]:
        """y of Algorithm 1: the request's output tokens without the prime token."""
        return list(output_token_ids[1:] if self.prime is not None else output_token_ids)
