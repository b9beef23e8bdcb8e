"""The drafter's x_full view (`FullView`, owned by the proposer; it reads the drafter through its handle,
drafter_pass.DrafterHandle): its caches (the x_full KV pool, the image cache, the logits a kept until they are
verified), its feed (the whole prompt with the image on a request's
first step, chunked), then one pass per draft, and the image embeddings its prefill reads (the paper's patch 4).
It holds one record per request (`FullRow`: its ledger, rope positions, M-RoPE delta, whether it sees the image)
beside the pool blocks, image entry and stored logits its caches key by request.
The drafted tokens stay on the device until the last pass; a goes to the view's buffer, the drafts to the
request's state.
A cross-family pair's drafter reads x_comp in its own ids and template (another length than the verifier's
stream), so its x_comp view is a second FullView on the same pool (`tag` keeps its blocks apart): opened on the
drafter's x_comp ids (`open_ids`), it drafts for SD / SCD as this view drafts, and `score` gives b at the verified
positions ([pending, d_1..d_n] fed, the logits of the last n + 1 read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from asymspec_vl.core.sources import RowLedger

from .. import switches
from ..requests.mrope import prompt_positions, view_positions
from .draft_logits import DraftLogits
from .draft_pick import pick
from .drafter_pass import DrafterHandle, PassRow, chunk_feeds, run_pass, to_device
from .full_view_images import FullViewImages
from .full_view_pool import FullViewPool
from .mm_cache import ImageCache


@dataclass
class FullRow:
    """One request's x_full view."""

    ledger: RowLedger  # x_full's prompt, how much of prompt + y the pool holds, the speculative tail fed since
    positions: (
        torch.Tensor
    )  # [3, P] (M-RoPE) or [P] rope positions of the x_full prompt
    delta: int  # M-RoPE delta of the x_full prompt (the positions of y and the drafts continue from it)
    sees_image: (
        bool  # its prompt holds the image (its first feed reads the image embeddings)
    )

    @property
    def next_slot(self) -> int:
        """The cache index of the next token fed."""
        return self.ledger.n_cached + len(self.ledger.speculative)


class FullView:
    """The x_full view of the proposer's drafter, with the caches it owns."""

    def __init__(
        self, images: ImageCache | None, draft_logits: DraftLogits, tag: str = ""
    ):
        self.drafter: DrafterHandle | None = (
            None  # bound with the pool (lay_out), before any request
        )
        self.images = images  # patches (1), (2): per-request pixels, the vision tower once; None: a text drafter
        self.draft_logits = (
            draft_logits  # a, from the step that drafts to the step that verifies
        )
        self.pool: FullViewPool | None = (
            None  # laid out once the KV cache config is final (lay_out)
        )
        self.rows: dict[
            str, FullRow
        ] = {}  # req_id -> its x_full view, from open to release
        self.tag = (
            tag  # the pool key of a request is req_id + tag (two views on one pool)
        )

    def lay_out(
        self,
        drafter: DrafterHandle,
        kernel_block_size: int,
        pool: FullViewPool | None = None,
    ) -> None:
        """The drafter, and its x_full pool in the kernel's block size, once the KV cache config is final
        (`pool`: another view's, shared)."""
        self.drafter = drafter
        self.pool = pool or FullViewPool(
            drafter.attn_layers, drafter.vllm_config, drafter.device, kernel_block_size
        )

    def open(self, req_id: str, request, x_comp: list[int]) -> None:
        """A request's x_full view, on its first step: its prompt (x_comp when patch 5 is off and x_full is not
        longer), rope positions and images. request: its parsed AsymSpecRequest."""
        ids, grid, pixels = request.x_full, request.image_grid_thw, request.pixel_values
        if not switches.enabled("no_length_gate") and len(ids) <= len(x_comp):
            ids, grid, pixels = (
                x_comp,
                None,
                None,
            )  # the original aug-substitution gate (patch 5 off)
        self._open(req_id, ids, grid, pixels)

    def open_ids(self, req_id: str, ids: list[int]) -> None:
        """A text view of the request on the prompt `ids` (a cross-family drafter's own x_comp)."""
        self._open(req_id, ids, None, None)

    def _open(self, req_id: str, ids: list[int], grid, pixels) -> None:
        drafter = self.drafter
        positions, delta = prompt_positions(
            drafter.model, ids, grid, drafter.facts.image_token_id, drafter.uses_mrope
        )
        self.rows[req_id] = FullRow(
            RowLedger(prompt=list(ids)), positions, delta, pixels is not None
        )
        if pixels is not None:
            self.images.put(req_id, pixels, grid)  # patch (1)

    def commit(self, req_id: str, y: list[int], lookahead: int) -> list[int]:
        """Commit y (Algorithm 1's committed output) into the request's ledger and reserve pool blocks for its
        feed and `lookahead` more tokens (AsymSpecError when the pool is full). -> the feed: the tokens of
        prompt + y the pool does not hold yet."""
        ledger = self.rows[req_id].ledger
        ledger.commit(y)
        feed = ledger.pending(y)
        self.pool.reserve(req_id + self.tag, ledger.n_cached + len(feed) + lookahead)
        return feed

    def release(self, req_id: str) -> None:
        self.rows.pop(req_id, None)
        if self.pool is not None:
            self.pool.release(req_id + self.tag)
        if self.images is not None:
            self.images.drop(req_id)
        self.draft_logits.release(req_id)

    def logits(self, req_ids: list[str], n: int) -> torch.Tensor:
        """a: the first n stored x_full logits of each request. -> [len(req_ids), n, V]."""
        return self.draft_logits.gather(req_ids, n)

    def images_for(self, plan, fail: Callable) -> FullViewImages | None:
        """Patch (4) input: where the image_pad tokens of the x_full rows whose feed holds them (their first
        step) lie; their cached images run through the vision tower as the prefill reaches each row, in bounded
        bursts (full_view_images.py). A row whose vision tower fails is failed alone (fail(req_id, state, err);
        without tensor parallelism, see faults.py) and leaves the step before its first token is fed. None: no
        row reads image embeddings this step."""
        drafter = self.drafter
        masks = [
            torch.tensor(feed) == drafter.facts.image_token_id
            if self.rows[req_id].sees_image and drafter.facts.image_token_id in feed
            else None
            for req_id, _, feed in plan.full_rows
        ]
        if all(m is None for m in masks):
            return None
        return FullViewImages(
            plan.full_rows,
            masks,
            self.images.embeddings,
            fail,
            drafter.request_errors,
        )

    def draft(self, rows, images: FullViewImages | None) -> dict[str, list[int]]:
        """a and the drafts of every x_full row: its feed, then one pass per draft; the drafted tokens stay on
        the device until the last pass (one host copy per step, so a GPU runs the passes back to back). What
        is constant over the step's passes is built once: each row's block table (plan reserved its blocks for
        the feed and the drafts), its cache indices and rope positions; a goes to the buffer in one copy."""
        drafter = self.drafter
        last = self.first_pass(rows, images)
        # a row whose vision tower failed left the step (images.admit)
        rows = [row for row, a_1 in zip(rows, last) if a_1 is not None]
        if not rows:
            return {}
        first = torch.stack(
            [a_1 for a_1 in last if a_1 is not None]
        )  # [R, V] a_1 per row
        passes = [
            state.request.num_draft_logits for _, state, _ in rows
        ]  # a_1..a_K (a_{K+1} if the rule reads it)
        banned = torch.stack([state.banned for _, state, _ in rows])  # [R, V]
        a = first.new_empty(
            len(rows), max(passes), first.shape[-1]
        )  # [R, max passes, V]
        a[:, 0] = first
        tokens = pick(
            first, [s for _, s, _ in rows], 0, banned, vmap=drafter.vmap
        )  # [R] d_1 per row
        drafted = [tokens]
        tables = [self.block_table(req_id) for req_id, _, _ in rows]
        views = [self.rows[req_id] for req_id, _, _ in rows]
        starts = [view.next_slot for view in views]  # d_1's cache index
        positions = [
            view_positions(view.positions, view.delta, start, n - 1, drafter.uses_mrope)
            for view, start, n in zip(views, starts, passes)
        ]  # [3, n-1] / [n-1]: d_1..d_{n-1}
        for k in range(1, max(passes)):
            live = [r for r in range(len(rows)) if k < passes[r]]
            index = (
                to_device(torch.tensor(live), drafter.device)
                if len(live) < len(rows)
                else None
            )
            batch = [
                PassRow(1, starts[r] + k - 1, positions[r][..., k - 1 : k], tables[r])
                for r in live
            ]
            hidden, last = run_pass(
                drafter,
                batch,
                self.pool.block_size,
                self.pool.tensors,
                token_ids=tokens if index is None else tokens[index],
                decode=True,
            )
            step = drafter.model.compute_logits(hidden[last])  # [len(live), V]
            if index is None:
                a[:, k] = step
            else:
                a[index, k] = step
            new = pick(
                step,
                [rows[r][1] for r in live],
                k,
                banned if index is None else banned[index],
                vmap=drafter.vmap,
            )  # [live]
            tokens = new if index is None else tokens.index_put((index,), new)
            drafted.append(tokens)
        own, drafts = drafts_both_ids(
            torch.stack(drafted, 1), drafter.vmap
        )  # [R, max passes] each: the step's one wait for the device
        self.draft_logits.store_rows([req_id for req_id, _, _ in rows], a, passes)
        out = {}
        for (req_id, state, _), view, own_drafts, row_drafts, n, start in zip(
            rows, views, own, drafts, passes, starts
        ):
            # the passes after the feed read d_1 .. d_{n-1} (in the drafter's ids)
            view.ledger.speculative.extend(
                (start + j, d) for j, d in enumerate(own_drafts[: n - 1])
            )
            state.drafts = row_drafts[: state.K]  # the engine's (verifier) ids
            out[req_id] = state.drafts
        return out

    def first_pass(self, rows, images: FullViewImages | None) -> list[torch.Tensor]:
        """Each row's feed (its whole x_full prompt on the first step) through the drafter, in chunks of at
        most max_num_batched_tokens tokens (the activations vLLM's profile sized); the logits after each
        row's last feed token, a_1 (each [V]; None for a row whose vision tower failed: it left the step)."""
        drafter = self.drafter
        feeds = [feed for _, _, feed in rows]
        last: list[torch.Tensor | None] = [None] * len(rows)
        admit = images.admit if images is not None else None
        for chunk in chunk_feeds(
            [len(f) for f in feeds], drafter.max_batched_tokens, admit
        ):
            batch = []
            for r, lo, hi in chunk:
                req_id, _, feed = rows[r]
                batch.append(self.pass_row(req_id, hi - lo))
                self.rows[req_id].ledger.speculative.extend(
                    (batch[-1].start + j, t) for j, t in enumerate(feed[lo:hi])
                )
            ids = to_device(
                torch.tensor([t for r, lo, hi in chunk for t in feeds[r][lo:hi]]),
                drafter.device,
            )
            embeds = None
            if images is not None:
                mask, parts = images.take(chunk)  # [N], each row's [n_r, D]
                if parts:  # patch (4): the image tokens read the vision tower's output, DeepStack included
                    embeds = drafter.model.embed_input_ids(
                        ids,
                        multimodal_embeddings=parts,
                        is_multimodal=to_device(mask, drafter.device),
                    )
            hidden, ends = run_pass(
                drafter,
                batch,
                self.pool.block_size,
                self.pool.tensors,
                token_ids=None if embeds is not None else ids,
                inputs_embeds=embeds,
            )
            done = [j for j, (r, _, hi) in enumerate(chunk) if hi == len(feeds[r])]
            if done:
                step = drafter.model.compute_logits(
                    hidden[ends[done]]
                )  # [len(done), V]
                for j, row_logits in zip(done, step):
                    last[chunk[j][0]] = row_logits
        return last

    def score(self, rows: list[tuple[str, list[int]]], n_out: int) -> torch.Tensor:
        """Feed each row's tokens (its pending committed tokens, then the drafts being verified; the commit
        reserved their blocks) in chunks of at most max_num_batched_tokens, and return the logits after each
        row's last n_out tokens. rows: (req_id, tokens), every row at least n_out tokens. -> [R * n_out, V]."""
        drafter = self.drafter
        feeds = [tokens for _, tokens in rows]
        out: list[list[torch.Tensor]] = [[] for _ in rows]
        for chunk in chunk_feeds([len(f) for f in feeds], drafter.max_batched_tokens):
            batch, at, offset = [], [], 0
            for r, lo, hi in chunk:
                req_id = rows[r][0]
                batch.append(self.pass_row(req_id, hi - lo))
                self.rows[req_id].ledger.speculative.extend(
                    (batch[-1].start + j, t) for j, t in enumerate(feeds[r][lo:hi])
                )
                first = max(
                    lo, len(feeds[r]) - n_out
                )  # the row's tokens whose logits are read
                at.extend(offset + j - lo for j in range(first, hi))
                offset += hi - lo
            ids = to_device(
                torch.tensor([t for r, lo, hi in chunk for t in feeds[r][lo:hi]]),
                drafter.device,
            )
            hidden, _ = run_pass(
                drafter, batch, self.pool.block_size, self.pool.tensors, token_ids=ids
            )
            if not at:
                # a long feed's leading chunk reads no logits: no lm_head call, so no tensor-parallel gather of
                # [0, V / TP] (vLLM's runner never computes logits of 0 rows; the CPU build's shm_all_gather
                # dies on them with a divide trap). Every rank holds the same feeds, so all skip it alike.
                continue
            logits = drafter.model.compute_logits(
                hidden[to_device(torch.tensor(at, dtype=torch.long), drafter.device)]
            )
            k = 0
            for r, lo, hi in chunk:
                m = hi - max(lo, len(feeds[r]) - n_out)
                if m > 0:
                    out[r].append(logits[k : k + m])
                    k += m
        return torch.cat([x for row in out for x in row])

    def pass_row(self, req_id: str, length: int, offset: int = 0) -> PassRow:
        """The row's next `length` cache slots of x_full, `offset` slots past what its ledger lists (drafts
        not yet recorded there)."""
        view = self.rows[req_id]
        start = view.next_slot + offset
        pos = view_positions(
            view.positions, view.delta, start, length, self.drafter.uses_mrope
        )
        return PassRow(length, start, pos, self.block_table(req_id))

    def block_table(self, req_id: str) -> torch.Tensor:
        """The row's x_full blocks in order. -> [num_blocks] int32 (host)."""
        return torch.tensor(self.pool.blocks[req_id + self.tag], dtype=torch.int32)


def drafts_both_ids(drafted: torch.Tensor, vmap) -> tuple[list, list]:
    """The drafts [R, n] (drafter ids, on the device) on the host, in the drafter's ids and in the engine's: one
    gather through a cross-family pair's map (VocabMap, or None: one vocabulary, the same lists) and one copy."""
    if vmap is None:
        drafts = drafted.tolist()
        return drafts, drafts
    d2v = vmap.to(
        drafted.device
    ).d2v  # [Vd] verifier id of each drafter id (-1: unshared, never picked)
    own, theirs = torch.stack([drafted, d2v[drafted]]).tolist()
    return own, theirs
