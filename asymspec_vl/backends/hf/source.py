"""A transformers model reading one view with its own KV cache: ragged batched forwards, M-RoPE, rollback.

Cache layout: one DynamicCache of S slots shared by the B rows. A slot is valid for a row when it holds one
of that row's committed (or, until the next commit, speculative) tokens; padding and rolled-back slots stay
in the cache as holes that the attention mask hides. Trailing slots that no row uses are cropped, so with
batch 1 a rollback is a plain crop. Positions are explicit: the j-th token of a row (prompt included, holes
excluded) sits at position j + rope_delta (rope_delta = 0 for text models; Qwen3-VL's M-RoPE delta after
the image otherwise), repeated on the three M-RoPE axes for generated tokens.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ...core.sources import RowLedger


class HFSource:
    """One logit source: `model` on per-row `prompts`, image inputs (Qwen3-VL only) read once at prefill."""

    def __init__(
        self, model, prompts: list[list[int]], pad_id: int, images: dict | None = None
    ):
        self.model = model
        self.device = model.device
        self.mrope = hasattr(model, "visual") or hasattr(
            getattr(model, "model", None), "visual"
        )
        self.pad_id = pad_id
        # every prompt token but the last is as good as cached: the prefill (run by the first forward at the latest)
        # reads them; the last stays pending, so the first forward yields the logits that follow the prompt
        self.rows = [RowLedger(prompt=list(p), n_cached=len(p) - 1) for p in prompts]
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros(
            len(prompts), 0, dtype=torch.bool, device=self.device
        )  # [B, S]
        self.rope_delta = [0] * len(prompts)
        self.images = (
            images or {}
        )  # image inputs (pixel_values, image_grid_thw, per-row grids), read by the prefill
        self.prefilled = False
        self.sdpa = getattr(model.config, "_attn_implementation", None) == "sdpa"

    # -- the LogitSource protocol -------------------------------------------------------------
    def prefill(self) -> None:
        if not self.prefilled:
            self._prefill(self.images)
            self.prefilled, self.images = True, {}

    def pending(self, y: list[list[int]]) -> list[list[int]]:
        return [row.pending(yr) for row, yr in zip(self.rows, y)]

    def forward(self, tokens: list[list[int]]) -> torch.Tensor:
        self.prefill()
        n = max(len(t) for t in tokens)
        positions = []
        for row, toks, delta in zip(self.rows, tokens, self.rope_delta):
            start = row.n_cached + len(row.speculative)
            positions.append(
                [0] * (n - len(toks)) + [start + k + delta for k in range(len(toks))]
            )
        pos = torch.tensor(positions, device=self.device)  # [B, n]
        if self.mrope:
            pos = pos.unsqueeze(0).expand(
                3, -1, -1
            )  # [3, B, n]: text tokens share one index on t/h/w
        return self._append(tokens, n, pos, extra={})

    def commit(self, y: list[list[int]]) -> None:
        for r, (row, yr) in enumerate(zip(self.rows, y)):
            dropped = row.commit(yr)
            if dropped:
                self.valid[r, dropped] = False
        used = self.valid.any(dim=0).nonzero()
        keep = int(used[-1]) + 1 if len(used) else 0
        if keep < self.valid.shape[1]:  # rollback of trailing slots: crop the cache
            self.cache.crop(keep)
            self.valid = self.valid[:, :keep]

    # -- internals -----------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.valid.shape[1]

    def _prefill(self, images: dict) -> None:
        """Read every prompt token but the last (the first forward reads it and yields the first logits)."""
        heads = [row.prompt[:-1] for row in self.rows]
        n = max(len(h) for h in heads)
        if self.mrope:
            pos = torch.zeros(
                3, len(heads), n, dtype=torch.long, device=self.device
            )  # [3, B, n]
            for r, row in enumerate(self.rows):
                full_pos, self.rope_delta[r] = self._mrope_positions(
                    row.prompt, images, r
                )
                pos[:, r, n - len(heads[r]) :] = full_pos[:, :-1]
        else:
            pos = torch.tensor(
                [[0] * (n - len(h)) + list(range(len(h))) for h in heads],
                device=self.device,
            )
        self._append(heads, n, pos, extra=images, logits_to_keep=1)
        for row in self.rows:
            row.n_cached, row.speculative = len(row.prompt) - 1, []

    def _mrope_positions(
        self, prompt: list[int], images: dict, r: int
    ) -> tuple[torch.Tensor, int]:
        """Qwen3-VL 3-D positions [3, P] of one row's prompt and its rope delta, by transformers' own rule."""
        ids = torch.tensor([prompt], device=self.device)
        grid = images.get("row_image_grid_thw", [None] * len(self.rows))[r]
        if grid is None:
            return torch.arange(len(prompt), device=self.device).expand(3, -1), 0
        inner = self.model.model if hasattr(self.model, "model") else self.model
        pos, delta = inner.get_rope_index(
            ids, grid.to(self.device), None, torch.ones_like(ids)
        )
        return pos[:, 0], int(delta.item())

    @torch.no_grad()
    def _append(
        self,
        tokens: list[list[int]],
        n: int,
        pos: torch.Tensor,
        extra: dict,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        B, S = len(tokens), self.num_slots
        ids = torch.full((B, n), self.pad_id, dtype=torch.long, device=self.device)
        new_valid = torch.zeros(B, n, dtype=torch.bool, device=self.device)
        for r, toks in enumerate(tokens):
            if toks:
                ids[r, n - len(toks) :] = torch.tensor(toks, device=self.device)
                new_valid[r, n - len(toks) :] = True
                self.rows[r].speculative.extend(
                    (S + n - len(toks) + k, t) for k, t in enumerate(toks)
                )
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        kwargs = {k: v for k, v in extra.items() if not k.startswith("row_")}
        out = self.model(
            input_ids=ids,
            attention_mask=self._attention_mask(S, n),
            position_ids=pos,
            past_key_values=self.cache,
            use_cache=True,
            cache_position=torch.arange(S, S + n, device=self.device),
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        return out.logits  # [B, n, V] (or [B, 1, V] at prefill)

    def _attention_mask(self, start: int, n: int) -> torch.Tensor:
        """The mask of a forward of n new slots after `start` slots. Where transformers' SDPA attention needs a
        4D mask (a hole in the cache, or several new tokens after cached ones) it is built here, [B, 1, n, S]
        bool, slot s visible from new token i iff it is valid and s <= start + i: the very mask transformers
        would build (by vmap over a per-element function, which costs more than a decoder layer of a small
        model). Elsewhere, and for other attention implementations, the validity mask [B, S] as transformers
        takes it."""
        if self.sdpa and not ((n == 1 or start == 0) and bool(self.valid.all())):
            slots = torch.arange(start + n, device=self.device)
            causal = slots <= torch.arange(
                start, start + n, device=self.device
            ).unsqueeze(1)  # [n, S]
            return (self.valid.unsqueeze(1) & causal).unsqueeze(1)  # [B, 1, n, S]
        return self.valid.long()
