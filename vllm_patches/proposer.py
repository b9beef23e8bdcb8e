"""AsymSpecProposer: the drafter of speculative method "asymspec", one set of weights reading two views.

  x_comp view  the verifier's token stream, in the KV blocks vLLM allocates for the drafter's layers on the
               verifier's block table. `score_comp_view` runs the drafter on exactly the tokens the verifier
               runs on, in the same step and with the same attention metadata, so the logits b at the K+1
               verified positions come for O(K) work per step; mode "sd"/"scd" (and plain requests) draft
               from this view too.
  x_full view  the drafter's own prompt (image + full text) in a second paged cache (kv_pool), extended
               incrementally: each step feeds the newly committed tokens, then drafts K greedily (logits a).
The gate/fusion math does not live here (sampler.py calls the project's gate).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import SpecDecodeBaseProposer

from asymspec_vl.errors import AsymSpecError
from asymspec_vl.gate import greedy
from asymspec_vl.sources import RowLedger

from . import switches
from .drafter_pass import PassRow, run_pass
from .kv_pool import FullViewPool
from .mm_cache import ImageCache
from .mrope import generated_positions, prompt_positions, view_positions
from .request_args import EngineFacts, check_greedy, has_request_args, parse_request_args
from .rows import PRIME_KEY, RowState

_VISION_SPECIALS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


@dataclass
class DraftPlan:
    full_rows: list[tuple[str, RowState, list[int]]]  # (req_id, state, x_full tokens to feed first)
    comp_rows: list[tuple[int, str, RowState]]  # (batch index, req_id, state)


class AsymSpecProposer(DraftModelProposer):
    def __init__(self, vllm_config, device: torch.device, runner=None):
        # pass_hidden_states_to_model=True keeps the base class from reserving 1-D-position draft slots
        # (and from refusing an M-RoPE drafter): this proposer runs its own passes.
        SpecDecodeBaseProposer.__init__(self, vllm_config, device, True, runner)
        self.pass_hidden_states_to_model = False
        self._raise_if_draft_tp_mismatch()
        self.runner = runner
        self.K = self.num_speculative_tokens
        self.rows: dict[str, RowState] = {}
        self.errors: dict[str, str] = {}
        self.comp_hidden: torch.Tensor | None = None  # [num_tokens, H] this step's x_comp-view pass
        self.capture: dict | None = None  # probe.capture_full_view_logits: first proposals by request
        self.resumptions = 0  # preempted requests resumed with a held-back token (probe.counters)

    # -- set-up ---------------------------------------------------------------------------------
    def load_model(self, target_model) -> None:
        super().load_model(target_model)
        ctx = self.vllm_config.compilation_config.static_forward_context
        self.attn_layers = {name: ctx[name] for name in self._draft_attn_layer_names}
        self.uses_mrope = bool(self.draft_model_config.uses_mrope)
        hf = self.draft_model_config.hf_config
        vision = getattr(hf, "vision_config", None) if hasattr(self.model, "visual") else None
        self.images = ImageCache(self.model, self.device) if vision is not None else None
        self.facts = EngineFacts(
            K=self.K, vocab_size=self.draft_model_config.get_vocab_size(), max_model_len=self.max_model_len,
            image_token_id=getattr(hf, "image_token_id", None) if vision is not None else None,
            patch_dim=(vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
                       if vision is not None else None),
            merge_size=getattr(vision, "spatial_merge_size", 1))
        self.default_banned = tuple(getattr(hf, k) for k in _VISION_SPECIALS if getattr(hf, k, None) is not None)
        # allocated now, before vLLM measures the memory left for its KV cache
        self.pool = FullViewPool(self.attn_layers, self.vllm_config, self.device)

    # -- per-request state ----------------------------------------------------------------------
    def row(self, req_id: str) -> RowState:
        st = self.rows.get(req_id)
        if st is None:
            st = self.rows[req_id] = self._new_row(req_id)
        return st

    def _new_row(self, req_id: str) -> RowState:
        req = self.runner.requests[req_id]
        sp = req.sampling_params
        extra = (sp.extra_args if sp is not None else None) or {}
        st = RowState(None, prime=extra.get(PRIME_KEY))
        if not has_request_args(extra):
            return st
        try:
            st.args = parse_request_args(extra, self.facts)
            check_greedy(sp)
            st.banned_ids = tuple(sorted(st.args.banned or self.default_banned))
            st.banned = self._banned_mask(st.banned_ids)
            if st.args.mode == "asymspec":
                prime = [st.prime] if st.prime is not None else []
                self._open_full_view(req_id, st, list(req.prompt_token_ids) + prime)
        except (AsymSpecError, ValueError, TypeError, RuntimeError) as e:
            self.fail(req_id, st, e)
        return st

    def _open_full_view(self, req_id: str, st: RowState, x_comp: list[int]) -> None:
        ids, grid, pixels = st.args.x_full, st.args.image_grid_thw, st.args.pixel_values
        if not switches.enabled("no_length_gate") and len(ids) <= len(x_comp):
            ids, grid, pixels = x_comp, None, None  # the original aug-substitution gate (patch 5 off)
        st.full = RowLedger(prompt=list(ids))
        st.full_positions, st.delta = prompt_positions(self.model, ids, grid, self.facts.image_token_id,
                                                       self.uses_mrope)
        if pixels is not None:
            self.images.put(req_id, pixels, grid)  # patch (1)
            st.sees_image = True

    def _banned_mask(self, ids) -> torch.Tensor:
        mask = torch.zeros(self.facts.vocab_size, dtype=torch.bool, device=self.device)  # [V]
        mask[list(ids)] = True
        return mask

    def note_resumed(self, cached_reqs) -> None:
        """Before the runner aligns its state with a scheduler step: a resumed request whose output the
        scheduler shortened by one token had that token held back at its preemption; the resumed prefill
        emits it again (RowState.reemit). cached_reqs: SchedulerOutput.scheduled_cached_reqs."""
        resumed = cached_reqs.resumed_req_ids
        if not resumed:
            return  # the common step: nothing resumes
        for i, req_id in enumerate(cached_reqs.req_ids):
            req, n_out = self.runner.requests.get(req_id), cached_reqs.num_output_tokens[i]
            if req_id not in resumed or req is None or req_id not in self.rows:
                continue
            if self.rows[req_id].args is not None and len(req.output_token_ids) == n_out + 1:
                self.rows[req_id].reemit = (int(req.output_token_ids[-1]), n_out)
                self.resumptions += 1

    def fail(self, req_id: str, st: RowState, err: Exception) -> None:
        st.failed = f"{type(err).__name__}: {err}"
        self.errors[req_id] = st.failed
        self._release(req_id)

    def take_errors(self) -> dict[str, str]:
        errors, self.errors = self.errors, {}
        return errors

    def forget(self, req_ids) -> None:
        for req_id in req_ids:
            self.rows.pop(req_id, None)
            self._release(req_id)

    def _release(self, req_id: str) -> None:
        if hasattr(self, "pool"):
            self.pool.release(req_id)
        if self.images is not None:
            self.images.drop(req_id)

    # -- the x_comp view: logits b on the verifier's tokens ---------------------------------------
    def score_comp_view(self, input_ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Run the drafter on the verifier's step inputs (called inside the verifier's forward context)."""
        from vllm.forward_context import get_forward_context, set_forward_context

        ctx = get_forward_context()
        if self.uses_mrope and positions.dim() == 1:
            positions = positions.unsqueeze(0).expand(3, -1).contiguous()  # text: t = h = w
        with set_forward_context(ctx.attn_metadata, self.vllm_config, num_tokens=input_ids.shape[0],
                                 slot_mapping=ctx.slot_mapping):
            self.comp_hidden = self.model(input_ids=input_ids, positions=positions, inputs_embeds=None)

    def comp_logits(self, token_indices: torch.Tensor) -> torch.Tensor:
        """b at the given token indices of this step's verifier inputs. [n] -> [n, V]."""
        return self.model.compute_logits(self.comp_hidden[token_indices])

    # -- drafting -------------------------------------------------------------------------------
    def plan(self, req_ids: list[str], sampled: list[list[int]]) -> DraftPlan:
        """Commit this step's tokens into each row's x_full ledger; list what each view feeds next."""
        plan = DraftPlan([], [])
        for i, (req_id, new) in enumerate(zip(req_ids, sampled)):
            st = self.row(req_id)
            if not new or st.failed:
                continue  # a prefill chunk (nothing committed) or a request about to be finished
            st.reemit = None
            if st.mode == "asymspec":
                y = st.committed(self.runner.requests[req_id].output_token_ids)
                st.full.commit(y)
                feed = st.full.pending(y)
                try:  # blocks for the feed and the K drafts (admission control keeps room for them)
                    self.pool.reserve(req_id, st.full.n_cached + len(feed) + self.K + 1)
                except AsymSpecError as e:
                    self.fail(req_id, st, e)
                    continue
                plan.full_rows.append((req_id, st, feed))
            else:
                plan.comp_rows.append((i, req_id, st))
        # shortest feeds first: attention backends that split decodes from prefills expect decodes first
        plan.full_rows.sort(key=lambda row: len(row[2]))
        return plan

    def mm_embed_inputs(self, plan: DraftPlan) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """Patch (4) input: the cached image embeddings of rows whose x_full prefill is in the first pass,
        and the mask of their image_pad tokens among that pass's tokens ([N] bool)."""
        embeds, masks, kept = [], [], []
        for req_id, st, feed in plan.full_rows:
            mask = torch.zeros(len(feed), dtype=torch.bool)
            if st.sees_image and self.facts.image_token_id in feed:
                try:
                    embeds.extend(self.images.embeddings(req_id))  # patch (2): once per request
                except (RuntimeError, ValueError) as e:
                    self.fail(req_id, st, e)
                    continue
                mask = torch.tensor(feed) == self.facts.image_token_id
            masks.append(mask)
            kept.append((req_id, st, feed))
        plan.full_rows = kept
        return (embeds, torch.cat(masks).to(self.device)) if embeds else None

    def propose(self, plan: DraftPlan, mm_embed_inputs=None) -> dict[str, list[int]]:
        """Draft K tokens per row: asymspec rows from x_full (with the image embeddings on their first
        pass), the others from x_comp. Returns req_id -> drafts."""
        drafts = {}
        if plan.full_rows:
            drafts.update(self._draft_full_view(plan, mm_embed_inputs))
        if plan.comp_rows:
            drafts.update(self._draft_comp_view(plan.comp_rows))
        return drafts

    def _draft_full_view(self, plan: DraftPlan, mm) -> dict[str, list[int]]:
        rows = plan.full_rows
        feeds = [feed for _, _, feed in rows]
        passes = [self.K + (st.args.cfg.bonus == "fused") for _, st, _ in rows]  # a_{K+1} for a fused bonus
        embeds = None
        if mm is not None:
            ids = torch.tensor([t for f in feeds for t in f], dtype=torch.long, device=self.device)
            embeds = self.model.embed_input_ids(ids, multimodal_embeddings=mm[0], is_multimodal=mm[1])
        logits = [[] for _ in rows]
        for k in range(max(passes, default=0)):
            live = [r for r in range(len(rows)) if k < passes[r]]
            batch = [self._full_pass_row(rows[r][0], rows[r][1], feeds[r]) for r in live]
            hidden, last = run_pass(self, batch, self.pool.block_size, self.pool.tensors, embeds)
            embeds = None
            lg = self.model.compute_logits(hidden[last])  # [len(live), V]
            d = greedy(lg, torch.stack([rows[r][1].banned for r in live]))
            for j, r in enumerate(live):
                logits[r].append(lg[j])
                feeds[r] = [int(d[j])]
        out = {}
        for (req_id, st, _), lg in zip(rows, logits):
            st.a = torch.stack(lg)  # [K (+1), V]
            st.drafts = [int(x) for x in greedy(st.a[:self.K], st.banned)]
            out[req_id] = st.drafts
            if self.capture is not None and req_id not in self.capture:
                self.capture[req_id] = {"x_full": tuple(st.args.x_full), "view": tuple(st.full.prompt),
                                        "drafts": list(st.drafts), "a": st.a[:self.K].float().cpu()}
        return out

    def _full_pass_row(self, req_id: str, st: RowState, tokens: list[int]) -> PassRow:
        ledger = st.full
        start = ledger.n_cached + len(ledger.speculative)
        ledger.speculative.extend((start + k, t) for k, t in enumerate(tokens))
        pos = view_positions(st.full_positions, st.delta, start, len(tokens), self.uses_mrope)
        return PassRow(tokens, start, pos, torch.tensor(self.pool.blocks[req_id], dtype=torch.int32))

    def _draft_comp_view(self, rows) -> dict[str, list[int]]:
        """Greedy drafts from the verifier's token stream, written into the lookahead slots vLLM reserves.
        Right after a prompt vLLM reserves none: a row whose drafts reach an unallocated block writes them
        through vLLM's null block, so such rows draft one at a time (never sharing those slots)."""
        table = self.runner.input_batch.block_table[self.kv_cache_gid]
        blocks = table.get_device_tensor(self.runner.input_batch.num_reqs).cpu()
        reqs = {req_id: self.runner.requests[req_id] for _, req_id, _ in rows}
        starts = {req_id: r.num_tokens - 1 for req_id, r in reqs.items()}
        fits = [bool(blocks[i, (starts[req_id] + self.K - 1) // table.block_size] > 0) for i, req_id, _ in rows]
        groups = [[row for row, ok in zip(rows, fits) if ok]] + [[row] for row, ok in zip(rows, fits) if not ok]
        drafts = {}
        for group in (g for g in groups if g):
            tokens = [reqs[req_id].output_token_ids[-1] for _, req_id, _ in group]
            banned = torch.stack([st.banned if st.banned is not None else
                                  torch.zeros(self.facts.vocab_size, dtype=torch.bool, device=self.device)
                                  for _, _, st in group])
            for k in range(self.K):
                batch = [PassRow([tok], starts[req_id] + k,
                                 generated_positions(starts[req_id] + k, 1, 0, self.uses_mrope), blocks[i])
                         for (i, req_id, _), tok in zip(group, tokens)]
                hidden, last = run_pass(self, batch, table.block_size)
                tokens = greedy(self.model.compute_logits(hidden[last]), banned).tolist()
                for (_, req_id, _), t in zip(group, tokens):
                    drafts.setdefault(req_id, []).append(t)
        return drafts

