"""A logit source of the drafter's vocabulary driven in verifier ids: the loop's y and drafts are verifier ids
(the map translates them at this boundary); its logits stay in drafter space [B, n, Vd] for the rules of
core/vocab_align.py."""

from __future__ import annotations

import torch

from .sources import LogitSource
from .vocab_align import VocabMap


class MappedSource:
    """`inner` (drafter ids) behind the loop's verifier ids: pending / commit translate y, own() the drafts."""

    def __init__(self, inner: LogitSource, vmap: VocabMap):
        self.inner, self.vmap = inner, vmap
        self.y_own: list[
            list[int]
        ] = []  # per row: y in drafter ids (y only grows: translated once per token)

    def own(self, ids: list[int]) -> list[int]:
        """Verifier ids (shared) -> this source's ids: one gather of these ids (no dict of the shared set per
        batch); ConfigError for an unshared one."""
        return self.vmap.to_drafter_ids(torch.tensor(ids, dtype=torch.long)).tolist()

    def _translate(self, y: list[list[int]]) -> list[list[int]]:
        if not self.y_own:
            self.y_own = [[] for _ in y]
        for mine, row in zip(self.y_own, y):
            mine.extend(self.own(row[len(mine) :]))
        return self.y_own

    def prefill(self) -> None:
        self.inner.prefill()

    def pending(self, y: list[list[int]]) -> list[list[int]]:
        return self.inner.pending(self._translate(y))

    def forward(self, tokens: list[list[int]]) -> torch.Tensor:
        return self.inner.forward(tokens)

    def commit(self, y: list[list[int]]) -> None:
        self.inner.commit(self._translate(y))
