"""The logit-source protocol the decoding loop runs on, and the per-row bookkeeping of what each cache holds.

A logit source is one model reading one view (x_full, x_comp or the question-only prompt) with its own
KV cache. Its cache holds a prefix of the row's sequence (prompt + committed tokens y) and, after a
forward, speculative tokens. `commit(y)` keeps the speculative tokens that y confirms and drops the rest
(the rollback after a rejection), so a source never re-reads what it already holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


class LogitSource(Protocol):
    """What the decoding loop needs from a model + view + cache."""

    def prefill(self) -> None:
        """Read the prompts (all but each row's last token); once, before the first forward."""

    def pending(self, y: list[list[int]]) -> list[list[int]]:
        """Per row: committed tokens (prompt tail + y) not yet in the cache."""

    def forward(self, tokens: list[list[int]]) -> torch.Tensor:
        """Append per-row token lists (ragged) and return logits [B, n, V], n = longest list;
        each row's tokens are right-aligned, so [:, -m:] are the logits after its last m tokens."""

    def commit(self, y: list[list[int]]) -> None:
        """y is now committed: keep the cached tokens that match it, roll back the others."""


@dataclass
class RowLedger:
    """Which tokens of one row's sequence a cache holds: the first n_cached committed tokens, then
    speculative (slot, token) pairs fed since the last commit."""

    prompt: list[int]
    n_cached: int = 0
    speculative: list[tuple[int, int]] = field(default_factory=list)

    def pending(self, y: list[int]) -> list[int]:
        P = len(self.prompt)
        if self.n_cached < P:
            return self.prompt[self.n_cached :] + y
        return y[self.n_cached - P :]

    def token_at(self, j: int, y: list[int]) -> int:
        return self.prompt[j] if j < len(self.prompt) else y[j - len(self.prompt)]

    def commit(self, y: list[int]) -> list[int]:
        """Confirm the speculative tokens that y agrees with; return the slots to invalidate.
        The last committed token is never confirmed: it stays pending, so the next forward has at least one
        token and yields the logits that follow it (a fused token can equal the draft it replaced)."""
        total = len(self.prompt) + len(y)
        kept = 0
        for _, tok in self.speculative:
            j = self.n_cached + kept
            if j >= total - 1 or self.token_at(j, y) != tok:
                break
            kept += 1
        dropped = [slot for slot, _ in self.speculative[kept:]]
        self.n_cached += kept
        self.speculative = []
        return dropped
