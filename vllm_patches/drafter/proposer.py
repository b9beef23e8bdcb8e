"""AsymSpecProposer: the drafter of speculative method "asymspec", one set of weights reading two views.

  x_comp view  (`self.comp`, comp_view.CompView) the verifier's token stream, in the KV blocks vLLM allocates for
               the drafter's layers on the verifier's block table. `CompView.score` runs the drafter on exactly the
               tokens the verifier
               runs on, in the same step (with the verifier step's queries and block table, but attention
               metadata planned for the drafter's own heads), so the logits b at the K+1 verified positions
               come for O(K) work per step; mode "sd"/"scd" (and plain requests) draft from this view too.
  x_full view  (`self.full`, full_view.FullView) the drafter's own prompt (image + full text) in a second paged cache
  (full_view_pool.py), extended
               incrementally: each step feeds the newly committed tokens (the whole prompt on a request's
               first step, in chunks of at most max_num_batched_tokens), then drafts K (logits a,
               kept in draft_logits until the next step verifies them).
Each draft is picked by draft_pick.py on either view: greedily, or, for a request that samples, drawn from its
filtered distribution with the request's own generator (rows.RowState.generator), the stop tokens held back
below min_tokens; a sampling sd / scd request's x_comp drafting logits q go to draft_logits too (the sampler's
lossless rule needs the exact q).
The drafter's decode-shaped passes (x_comp scoring, x_comp drafting, the x_full passes after a step's first)
run through vLLM's compilation of the drafter and, on CUDA, its PIECEWISE CUDA graphs (drafter_graphs.py);
a step's first x_full pass (its feed, with the image embeddings and DeepStack features) runs eagerly, and so
does everything with the engine's or the speculative config's enforce_eager.
Each view owns its caches and passes (full_view.py, comp_view.py) and reads the drafter through one frozen
handle (drafter_pass.DrafterHandle), never the proposer; the gate/fusion math does not live here (sampler.py calls
the methods' rules, reading the drafter's logits by name: step_logits); requests are parsed and failed by the
registry (rows.py). The proposer owns the worker's step: each runner hook (hooks/runner_patch.py) calls one of
its methods, on_scheduled, keep_verifier_metadata, after_verifier, draft, take_errors (and take_cut_steps),
profile_vision_tower.
A cross-family pair (two vocabularies: `vmap`, requests/engine_map.py) crosses its map at this boundary: the
committed tokens go to the drafter in its ids (RowState.y_drafter), the drafts come back in the verifier's
(full_view.drafts_both_ids), and the drafter reads x_comp in its own ids and template, as a second FullView on the
x_full pool (`comp_own`: b, and the drafts of SD / SCD) instead of the verifier's stream (docs/cross-family.md,
"vLLM engine"). A same-family pair (vmap None) never touches any of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import SpecDecodeBaseProposer

from asymspec_vl.core.errors import AsymSpecError

from .. import switches
from ..requests.engine_map import (
    cross_family_refusal,
    engine_vocab_map,
    to_drafter_ids,
)
from ..requests.faults import check_ranks_agree, request_errors, stop_rank_on_error
from ..requests.request_args import engine_facts
from ..requests.rows import RequestRegistry, RowState
from .comp_view import CompView
from .draft_logits import DraftLogits
from .drafter_attention import DrafterAttention, verifier_common_for_group
from .drafter_graphs import DrafterGraphs
from .drafter_pass import DrafterHandle
from .full_view import FullView, FullViewImages
from .full_view_pool import reserve_bytes
from .mm_cache import ImageCache

_VISION_SPECIALS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
)


@dataclass
class DraftPlan:
    full_rows: list[
        tuple[str, RowState, list[int]]
    ]  # (req_id, state, x_full tokens to feed first)
    comp_rows: list[tuple[int, str, RowState]]  # (batch index, req_id, state)
    own_comp_rows: list[tuple[str, RowState, list[int]]] = field(
        default_factory=list
    )  # a cross-family pair's x_comp rows: (req_id, state, drafter-id tokens to feed first)


def run_eagerly(model: torch.nn.Module) -> None:
    """Every vLLM-compiled submodule of `model` calls its plain forward from now on."""
    for module in model.modules():
        if hasattr(module, "do_not_compile"):
            module.do_not_compile = True


class AsymSpecProposer(DraftModelProposer):
    def __init__(self, vllm_config, device: torch.device, runner=None):
        # pass_hidden_states_to_model=True keeps the base class from reserving 1-D-position draft slots
        # (and from refusing an M-RoPE drafter): this proposer runs its own passes.
        SpecDecodeBaseProposer.__init__(self, vllm_config, device, True, runner)
        self.pass_hidden_states_to_model = False
        self._raise_if_draft_tp_mismatch()
        self.runner = runner
        self.K = self.num_speculative_tokens  # the most drafts a request may ask for
        self.world_size = vllm_config.parallel_config.tensor_parallel_size
        self.request_errors = request_errors(self.world_size)
        self.max_batched_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.full: FullView | None = (
            None  # made in load_model (its caches need the model); drafter and pool later
        )
        self.comp: CompView | None = (
            None  # made with the drafter's handle (initialize_attn_backend)
        )

    # -- set-up ---------------------------------------------------------------------------------
    def _create_draft_vllm_config(self):
        """The drafter's VllmConfig, built once, when the model loads (as vLLM's draft models build it): a
        rebuild re-runs VllmConfig.__post_init__, which, after the runner has set its CUDA-graph sizes, would
        re-derive them on the compilation config the verifier shares."""
        if getattr(self, "_draft_vllm_config", None) is None:
            self._draft_vllm_config = super()._create_draft_vllm_config()
        return self._draft_vllm_config

    def load_model(self, target_model) -> None:
        super().load_model(target_model)
        self.graphs = DrafterGraphs(
            self.model,
            self.vllm_config,
            self.draft_model_config.get_hidden_size(),
            self.draft_model_config.dtype,
            bool(self.draft_model_config.uses_mrope),
            self.device,
            bool(self.speculative_config.enforce_eager),
        )
        if not self.graphs.enabled:
            run_eagerly(self.model)
        ctx = self.vllm_config.compilation_config.static_forward_context
        self.attn_layers = {name: ctx[name] for name in self._draft_attn_layer_names}
        self.uses_mrope = bool(self.draft_model_config.uses_mrope)
        hf = self.draft_model_config.hf_config
        self.facts = engine_facts(
            self.vllm_config
        )  # as the scheduler parsed the requests against
        if self.facts.image_token_id is not None and not hasattr(self.model, "visual"):
            raise ValueError(
                f"speculative method 'asymspec': the drafter {self.draft_model_config.model} has an "
                "image config but no Qwen-VL vision tower (`visual`) in vLLM"
            )
        images = (
            ImageCache(self.model, self.device)
            if self.facts.image_token_id is not None
            else None
        )
        banned = tuple(
            getattr(hf, k) for k in _VISION_SPECIALS if getattr(hf, k, None) is not None
        )
        # allocated now, before vLLM measures the memory left for its KV cache, so that its profile counts them
        self.pool_reservation = reserve_bytes(
            self.attn_layers, self.vllm_config, self.device
        )
        self.full = FullView(
            images,
            DraftLogits(
                self.vllm_config.scheduler_config.max_num_seqs,
                self.K,
                self.facts.vocab_size,
                self.draft_model_config.dtype,
                self.device,
            ),
        )
        # a cross-family pair's map (None: one vocabulary, today's path): the proposer's ids cross it at its
        # boundary, and the drafter's x_comp is its own view on the x_full pool (docs/cross-family.md)
        self.vmap = engine_vocab_map(self.vllm_config)
        self.comp_own = (
            FullView(None, self.full.draft_logits, tag="/x_comp")
            if self.vmap is not None
            else None
        )
        self.registry = RequestRegistry(
            self.facts,
            banned,
            self.device,
            self.request_errors,
            self.release_views,
            self.vmap,
        )

    def initialize_attn_backend(
        self, kv_cache_config, kernel_block_sizes: list[int] | None = None
    ) -> None:
        """vLLM's draft attention groups, then builders planned for the drafter's heads, the drafter's handle
        the views read, and the x_full pool in the final kernel block size (self.block_size)."""
        super().initialize_attn_backend(kv_cache_config, kernel_block_sizes)
        self.graphs.initialize_keys()  # the runner has resolved its cudagraph mode and capture sizes
        self.attention = DrafterAttention(
            self.draft_attn_groups,
            self._create_draft_vllm_config(),
            self.device,
            getattr(self.runner, "reorder_batch_threshold", None),
        )
        self.attention.share_workspaces(getattr(self.runner, "attn_groups", []))
        self.pool_reservation = None  # its memory goes to the pool
        drafter = DrafterHandle(
            self.model,
            self.device,
            self.vllm_config,
            self.attention,
            self.graphs,
            self.attn_layers,
            self.uses_mrope,
            self.facts,
            self.max_batched_tokens,
            self.kv_cache_gid,
            self.request_errors,
            self.vmap,
        )
        self.full.lay_out(drafter, self.block_size)
        if self.comp_own is not None:
            self.comp_own.lay_out(drafter, self.block_size, self.full.pool)
        self.comp = CompView(drafter, self.full.draft_logits)

    def dummy_run(
        self,
        num_tokens: int,
        use_cudagraphs: bool = True,
        is_graph_capturing: bool = False,
        slot_mappings=None,
    ) -> None:
        """The runner's dummy runs (profile, warm-up, capture_model): the compiled drafter traced, and its
        graphs captured, in the form of its compiled passes (drafter_graphs.py)."""
        if not self.graphs.enabled:
            return super().dummy_run(
                num_tokens, use_cudagraphs, is_graph_capturing, slot_mappings
            )
        names = (
            self._draft_attn_layer_names
        )  # KV-writing layers only where the runner has slots for them (eagle.py)
        self.graphs.dummy_run(
            num_tokens,
            names if slot_mappings and names & set(slot_mappings) else (),
            use_cudagraphs,
        )

    def profile_vision_tower(self) -> list[int] | None:
        """The vision tower on the largest image (inside the runner's profile run); its grid, or None."""
        if self.full.images is None or not switches.enabled("mm_embeds"):
            return None
        return self.full.images.profile(self.draft_model_config)

    # -- the worker's step: one method per runner hook (hooks/runner_patch.py), in step order -----------
    def on_scheduled(self, scheduler_output) -> None:
        """Before the runner updates its states: forget finished requests (their caches and blocks); free the
        stored logits a of preempted ones (their drafts were dropped; a sampling one's generator goes back to
        before those drafts' draws) and note resumed ones that re-emit a held-back token (rows.RowState.reemit).
        A skipped request keeps its queued drafts."""
        self.registry.forget(scheduler_output.finished_req_ids)
        for req_id in scheduler_output.preempted_req_ids or ():
            self.full.draft_logits.release(req_id)
            self.registry.drop_drafts(req_id)
        self.registry.note_resumed(
            scheduler_output.scheduled_cached_reqs, self.runner.requests
        )

    def keep_verifier_metadata(
        self, common, slot_mappings_by_group: dict | None
    ) -> None:
        """The verifier step's CommonAttentionMetadata (vLLM's spec-decode one), as the drafter's KV group sees
        it: the x_comp pass plans its own metadata from it (drafter_attention.py)."""
        self.comp.verifier_common = verifier_common_for_group(
            common, self.runner, self.kv_cache_gid, slot_mappings_by_group
        )

    def after_verifier(self, out, input_ids: torch.Tensor, positions: torch.Tensor):
        """After the verifier's forward on input_ids [N] (positions [N] or [3, N]): its output kept out of the
        drafter's CUDA-graph pool when a graph replays next, then the x_comp pass on the same inputs (b).
        Returns the verifier's output for the runner."""
        out = self.graphs.keep_verifier_output(
            out, self.comp.verifier_common.num_actual_tokens
        )
        # a cross-family drafter reads its own x_comp (own_b), not the verifier's stream
        if self.vmap is None:
            with stop_rank_on_error(self.world_size, "the x_comp pass"):
                self.comp.score(input_ids, positions)
        return out

    def step_logits(
        self,
        name: str,
        req_ids: list[str],
        n: int,
        token_index: torch.Tensor | None = None,
        drafts: torch.Tensor | None = None,
    ):
        """The drafter's logits of this step by name, for the rows `req_ids`: "b" on x_comp at the verified
        token indices token_index [G * n] -> [G, n, V] (a cross-family pair: on its own x_comp view after the
        drafts [G, n - 1] being verified, own_b); otherwise ("a", and a sampling sd / scd row's drafting
        logits q) the first n stored x_full logits -> [G, n, V]."""
        if name == "b" and self.vmap is not None:
            return self.own_b(req_ids, n, drafts)
        if name == "b":
            return self.comp.logits(token_index).view(len(req_ids), n, -1)
        return self.full.logits(req_ids, n)

    def own_b(self, req_ids: list[str], n: int, drafts: torch.Tensor) -> torch.Tensor:
        """b of a cross-family pair: each row's drafter x_comp view fed its pending committed tokens and the
        drafts being verified (drafts [G, n - 1] verifier ids, moved to the drafter's by one gather), the logits
        after the last n read. -> [G, n, Vd]."""
        drafts_d = self.vmap.to("cpu").v2d[drafts.cpu()].tolist()  # [G, n - 1]
        rows = []
        for req_id, own in zip(req_ids, drafts_d):
            y = self.committed_drafter_ids(req_id, self.registry.rows[req_id])
            rows.append((req_id, self.comp_own.commit(req_id, y, n) + own))
        return self.comp_own.score(rows, n).view(len(req_ids), n, -1)

    def committed_drafter_ids(self, req_id: str, state: RowState) -> list[int]:
        """A cross-family row's committed tokens y in the drafter's ids (its kept translation extended by one
        gather of the new ones)."""
        y = state.committed(self.runner.requests[req_id].output_token_ids)
        return to_drafter_ids(self.vmap, state.y_drafter, y)

    def release_views(self, req_id: str) -> None:
        """Free a request's drafter views (its x_full view; a cross-family pair's own x_comp view)."""
        self.full.release(req_id)
        if self.comp_own is not None:
            self.comp_own.release(req_id)

    def draft(self, req_ids: list[str], sampled: list[list[int]]) -> list[list[int]]:
        """This step's drafts for the batch `req_ids` (vLLM's order) after it committed `sampled`: commit and plan
        (plan), the image inputs of the x_full rows whose feed holds the image (patch 4: embedded as the prefill
        reaches each row; with the switch off, x_full's prefill embeds the image_pad tokens as text), then the K
        passes (propose). Host
        lists, in batch order."""
        with stop_rank_on_error(self.world_size, "drafting"):
            plan = self.plan(req_ids, sampled)
            images = (
                self.full.images_for(plan, self.fail)
                if switches.enabled("mm_embeds")
                else None
            )
            drafts = self.propose(plan, images)
        return [drafts.get(req_id, []) for req_id in req_ids]

    def take_errors(self) -> dict[str, str]:
        """The requests failed since the last call (req_id -> "ErrorType: message"), after the tensor-parallel
        ranks agree on them (faults.check_ranks_agree on vLLM's tensor-parallel group)."""
        if self.world_size > 1:
            from vllm.distributed import get_tp_group  # lazy: loads vllm.distributed

            check_ranks_agree(get_tp_group(), list(self.registry.errors))
        return self.registry.take_errors()

    def take_cut_steps(self) -> set[str]:
        """The requests whose step committed its accepted drafts only since the last call (a structured output's
        dead end: grammar_dead_end.py)."""
        return self.registry.take_cut_steps()

    # -- requests -------------------------------------------------------------------------------
    def row(self, req_id: str) -> RowState:
        """The request's state, created (and its x_full view opened) on first sight."""
        state = self.registry.rows.get(req_id)
        if state is None:
            state = self.registry.add(req_id, self.runner.requests[req_id])
            prime = [state.prime] if state.prime is not None else []
            x_comp = list(self.runner.requests[req_id].prompt_token_ids) + prime
            if self.vmap is not None:  # the drafter's own x_comp (ids and template)
                refusal = cross_family_refusal(state.request)
                if refusal is not None:
                    self.fail(req_id, state, refusal)
                    return state
                x_comp = (
                    state.request.x_comp_drafter or []
                )  # [] where the method reads none
                if state.request.reads_drafter_comp:
                    self.comp_own.open_ids(req_id, x_comp)
            if state.request is not None and state.request.reads_full_view:
                try:
                    self.full.open(req_id, state.request, x_comp)
                except self.request_errors as e:
                    self.fail(req_id, state, e)
        return state

    def fail(self, req_id: str, state: RowState, err: Exception) -> None:
        self.registry.fail(req_id, state, err)

    # -- drafting -------------------------------------------------------------------------------
    def plan(self, req_ids: list[str], sampled: list[list[int]]) -> DraftPlan:
        """Commit this step's tokens into each row's x_full ledger; list what each view feeds next."""
        plan = DraftPlan([], [])
        for i, (req_id, new) in enumerate(zip(req_ids, sampled)):
            state = self.row(req_id)
            if not new or state.failed:
                continue  # a prefill chunk (nothing committed) or a request about to be finished
            state.reemit = None
            view = state.method.draft_view
            if view is None:
                continue  # Floor: no drafts, the verifier decodes alone
            state.y_len = state.num_committed(
                self.runner.requests[req_id].output_token_ids
            )  # d_1's output position
            if state.samples:  # a preemption drops this proposal: its draws are undone (rows.drop_drafts)
                state.draft_rng = state.generator.get_state()
            if view == "x_full":
                y = state.committed(self.runner.requests[req_id].output_token_ids)
                try:  # blocks for the feed and the K drafts (admission control keeps room for them)
                    if self.vmap is not None:  # the drafter's ledger holds drafter ids
                        y = to_drafter_ids(self.vmap, state.y_drafter, y)
                    feed = self.full.commit(req_id, y, state.K + 1)
                except AsymSpecError as e:
                    self.fail(req_id, state, e)
                    continue
                plan.full_rows.append((req_id, state, feed))
            elif (
                self.vmap is not None
            ):  # a cross-family drafter drafts on its own x_comp
                try:
                    y = self.committed_drafter_ids(req_id, state)
                    feed = self.comp_own.commit(req_id, y, state.K + 1)
                except AsymSpecError as e:
                    self.fail(req_id, state, e)
                    continue
                plan.own_comp_rows.append((req_id, state, feed))
            else:
                plan.comp_rows.append((i, req_id, state))
        # shortest feeds first: attention backends that split decodes from prefills expect decodes first
        plan.full_rows.sort(key=lambda row: len(row[2]))
        plan.own_comp_rows.sort(key=lambda row: len(row[2]))
        return plan

    def propose(
        self, plan: DraftPlan, images: FullViewImages | None = None
    ) -> dict[str, list[int]]:
        """Draft each row's K tokens: asymspec rows from x_full (with the image embeddings on their first
        pass), the others from x_comp. Returns req_id -> drafts."""
        drafts = {}
        if plan.full_rows:
            drafts.update(self.full.draft(plan.full_rows, images))
        if plan.own_comp_rows:
            drafts.update(self.comp_own.draft(plan.own_comp_rows, None))
        if plan.comp_rows:
            drafts.update(
                self.comp.draft(
                    plan.comp_rows, self.runner.input_batch, self.runner.requests
                )
            )
        return drafts
