"""Patch (4)'s input of one step, in bounded bursts: the image embeddings of the x_full rows whose feed holds
image_pad tokens, made as the x_full prefill reaches each row and dropped once it read them.

A step's rows are prefilled in chunks of at most max_num_batched_tokens tokens (full_view.first_pass). A row's
images run through the vision tower (mm_cache.ImageCache.embeddings, once per request) when the row's feed enters
a chunk (`admit`), and its embeddings leave once the chunk holding its last image token has read them (`take`): the
step holds the embeddings of the rows of one chunk, never of every image row at once (a step's image rows fill at
most the x_full pool, 65,536 tokens by default: with Qwen3-VL-2B's 4 x 2,048 bf16 columns a token, 1 GiB of
embeddings, and as much again for their concatenation). The chunks and what each reads
are those of embedding every row first: a row whose vision tower fails leaves the plan before its first token is
placed, as it left it before the chunking.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class FullViewImages:
    """The image embeddings one step's x_full prefill reads, made row by row as the prefill reaches the rows."""

    def __init__(
        self,
        rows: list,
        masks: list[torch.Tensor | None],
        embed: Callable[[str], tuple[torch.Tensor, ...]],
        fail: Callable,
        request_errors: tuple,
    ):
        """rows: the plan's x_full rows (req_id, RowState, feed); masks: per row [len(feed)] bool, True at
        image_pad tokens (None: the row reads no embeddings); embed: req_id -> its images' embeddings (each
        [tokens, hidden * (1 + DeepStack levels)]); fail(req_id, state, err) fails a request alone for the
        exceptions in request_errors (faults.request_errors)."""
        self.rows, self.masks = rows, masks
        self.embed, self.fail, self.request_errors = embed, fail, request_errors
        self.held: dict[
            int, torch.Tensor
        ] = {}  # row -> its embeddings [M_r, D] until read
        self.peak = 0  # the most embedding rows held at once this step

    def admit(self, r: int) -> bool:
        """Row r's feed enters the prefill: its images run through the vision tower now. False: the tower
        failed, the request is failed alone and the row leaves the step."""
        if self.masks[r] is None:
            return True
        req_id, state, _ = self.rows[r]
        try:
            self.held[r] = torch.cat(self.embed(req_id))  # patch (2): once per request
        except self.request_errors as e:
            self.fail(req_id, state, e)
            return False
        self.peak = max(self.peak, sum(len(e) for e in self.held.values()))
        return True

    def take(
        self, chunk: list[tuple[int, int, int]]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """What a prefill chunk [(row, lo, hi)] reads: its image_pad mask [N] and the embeddings of its image
        tokens, per row in order; a row's embeddings are dropped once read to its last image token."""
        masks, parts = [], []
        for r, lo, hi in chunk:
            mask = self.masks[r]
            if mask is None:
                masks.append(torch.zeros(hi - lo, dtype=torch.bool))
                continue
            masks.append(mask[lo:hi])
            first, n = int(mask[:lo].sum()), int(mask[lo:hi].sum())
            if n:
                parts.append(self.held[r][first : first + n])
            if not bool(mask[hi:].any()):
                self.held.pop(r, None)
        return torch.cat(masks), parts
