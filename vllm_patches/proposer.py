"""AsymSpecProposer: the drafter of speculative method "asymspec", one set of weights reading two views.

  x_comp view  the verifier's token stream, in the KV blocks vLLM allocates for the drafter's layers on the
               verifier's block table. `score_comp_view` runs the drafter on exactly the tokens the verifier
               runs on, in the same step (with the verifier step's queries and block table, but attention
               metadata planned for the drafter's own heads), so the logits b at the K+1 verified positions
               come for O(K) work per step; mode "sd"/"scd" (and plain requests) draft from this view too.
  x_full view  the drafter's own prompt (image + full text) in a second paged cache (kv_pool), extended
               incrementally: each step feeds the newly committed tokens (the whole prompt on a request's
               first step, in chunks of at most max_num_batched_tokens), then drafts K greedily (logits a,
               kept in draft_logits until the next step verifies them).
The drafter's decode-shaped passes (x_comp scoring, x_comp drafting, the x_full passes after a step's first)
run through vLLM's compilation of the drafter and, on CUDA, its PIECEWISE CUDA graphs (drafter_graphs.py);
a step's first x_full pass (its feed, with the image embeddings and DeepStack features) runs eagerly, and so
does everything with the engine's or the speculative config's enforce_eager.
The passes of each view are in full_view.py and comp_view.py; the gate/fusion math does not live here
(sampler.py calls the methods' rules); requests are parsed and failed by the registry (rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import SpecDecodeBaseProposer

from asymspec_vl.errors import AsymSpecError
from asymspec_vl.methods import DRAFTER_COMP, METHODS
from asymspec_vl.sources import RowLedger

from . import comp_view, full_view, switches
from .capture import LogitCapture
from .draft_logits import DraftLogits
from .drafter_attention import DrafterAttention
from .drafter_graphs import DrafterGraphs
from .faults import request_errors
from .kv_pool import FullViewPool, reserve_bytes
from .mm_cache import ImageCache
from .full_view import FullViewImages
from .mrope import prompt_positions
from .request_args import EngineFacts
from .rows import RequestRegistry, RowState

_VISION_SPECIALS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


@dataclass
class DraftPlan:
    full_rows: list[tuple[str, RowState, list[int]]]  # (req_id, state, x_full tokens to feed first)
    comp_rows: list[tuple[int, str, RowState]]  # (batch index, req_id, state)


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
        self.verifier_common = None  # this step's verifier CommonAttentionMetadata for the drafter's group
        self.comp_hidden: torch.Tensor | None = None  # [num_tokens, H] this step's x_comp-view pass
        self.capture: LogitCapture | None = None  # worker_extension.asymspec_set_capture: first proposals
        self.step_capture = None  # step_capture.StepCapture while probe.capture_step_logits is on
        self.pool = None  # laid out in initialize_attn_backend, once the KV cache config is final

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
        self.graphs = DrafterGraphs(self.model, self.vllm_config, self.draft_model_config.get_hidden_size(),
                                    self.draft_model_config.dtype, bool(self.draft_model_config.uses_mrope),
                                    self.device, bool(self.speculative_config.enforce_eager))
        if not self.graphs.enabled:
            run_eagerly(self.model)
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
        banned = tuple(getattr(hf, k) for k in _VISION_SPECIALS if getattr(hf, k, None) is not None)
        self.registry = RequestRegistry(self.facts, banned, self.device, self.request_errors, self._release)
        # allocated now, before vLLM measures the memory left for its KV cache, so that its profile counts them
        self.pool_reservation = reserve_bytes(self.attn_layers, self.vllm_config, self.device)
        self.draft_logits = DraftLogits(self.vllm_config.scheduler_config.max_num_seqs, self.K,
                                        self.facts.vocab_size, self.draft_model_config.dtype, self.device)

    def initialize_attn_backend(self, kv_cache_config, kernel_block_sizes: list[int] | None = None) -> None:
        """vLLM's draft attention groups, then builders planned for the drafter's heads and the x_full pool
        in the final kernel block size (self.block_size)."""
        super().initialize_attn_backend(kv_cache_config, kernel_block_sizes)
        self.graphs.initialize_keys()  # the runner has resolved its cudagraph mode and capture sizes
        self.attention = DrafterAttention(self.draft_attn_groups, self._create_draft_vllm_config(), self.device,
                                          getattr(self.runner, "reorder_batch_threshold", None))
        self.attention.share_workspaces(getattr(self.runner, "attn_groups", []))
        self.pool_reservation = None  # its memory goes to the pool
        self.pool = FullViewPool(self.attn_layers, self.vllm_config, self.device, self.block_size)

    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False,
                  slot_mappings=None) -> None:
        """The runner's dummy runs (profile, warm-up, capture_model): the compiled drafter traced, and its
        graphs captured, in the form of its compiled passes (drafter_graphs.py)."""
        if not self.graphs.enabled:
            return super().dummy_run(num_tokens, use_cudagraphs, is_graph_capturing, slot_mappings)
        names = self._draft_attn_layer_names  # KV-writing layers only where the runner has slots for them (eagle.py)
        self.graphs.dummy_run(num_tokens, names if slot_mappings and names & set(slot_mappings) else (),
                              use_cudagraphs)

    def profile_vision_tower(self) -> list[int] | None:
        """The vision tower on the largest image (inside the runner's profile run); its grid, or None."""
        if self.images is None or not switches.enabled("mm_embeds"):
            return None
        return self.images.profile(self.draft_model_config)

    # -- requests -------------------------------------------------------------------------------
    def row(self, req_id: str) -> RowState:
        return self.registry.row(req_id, self.runner.requests[req_id], self._open_full_view)

    def _open_full_view(self, req_id: str, state: RowState, x_comp: list[int]) -> None:
        ids, grid, pixels = state.args.x_full, state.args.image_grid_thw, state.args.pixel_values
        if not switches.enabled("no_length_gate") and len(ids) <= len(x_comp):
            ids, grid, pixels = x_comp, None, None  # the original aug-substitution gate (patch 5 off)
        state.full = RowLedger(prompt=list(ids))
        state.full_positions, state.delta = prompt_positions(self.model, ids, grid, self.facts.image_token_id,
                                                             self.uses_mrope)
        if pixels is not None:
            self.images.put(req_id, pixels, grid)  # patch (1)
            state.sees_image = True

    def fail(self, req_id: str, state: RowState, err: Exception) -> None:
        self.registry.fail(req_id, state, err)

    def _release(self, req_id: str) -> None:
        if self.pool is not None:
            self.pool.release(req_id)
        if self.images is not None:
            self.images.drop(req_id)
        if hasattr(self, "draft_logits"):
            self.draft_logits.release(req_id)

    # -- the x_comp view: logits b on the verifier's tokens ---------------------------------------
    def score_comp_view(self, input_ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Run the drafter on the verifier's step inputs (after the verifier's forward): the same queries and
        KV slots, the drafter's own attention metadata (see drafter_attention.py)."""
        from vllm.forward_context import set_forward_context

        common = self.verifier_common
        n = common.num_actual_tokens  # the verifier's input may be padded for a CUDA graph: not the drafter's
        positions = positions[..., :n]
        if self.uses_mrope and positions.dim() == 1:
            positions = positions.unsqueeze(0).expand(3, -1).contiguous()  # text: t = h = w
        metadata, slot_mapping = self.attention.build(common)
        if self.graphs.enabled:
            self.comp_hidden = self.graphs.forward(input_ids[:n], positions, metadata, common.slot_mapping,
                                                   self.attention.layer_names)
            return
        with set_forward_context(metadata, self.vllm_config, num_tokens=n, slot_mapping=slot_mapping,
                                 skip_compiled=True):
            self.comp_hidden = self.model(input_ids=input_ids[:n], positions=positions, inputs_embeds=None)

    def comp_logits(self, token_indices: torch.Tensor) -> torch.Tensor:
        """b at the given token indices of this step's verifier inputs. [n] -> [n, V]."""
        return self.model.compute_logits(self.comp_hidden[token_indices])

    def full_view_logits(self, req_ids: list[str], n: int) -> torch.Tensor:
        """a: the first n stored x_full logits of each request. -> [len(req_ids), n, V]."""
        return self.draft_logits.gather(req_ids, n)

    # -- drafting -------------------------------------------------------------------------------
    def plan(self, req_ids: list[str], sampled: list[list[int]]) -> DraftPlan:
        """Commit this step's tokens into each row's x_full ledger; list what each view feeds next."""
        plan = DraftPlan([], [])
        for i, (req_id, new) in enumerate(zip(req_ids, sampled)):
            state = self.row(req_id)
            if not new or state.failed:
                continue  # a prefill chunk (nothing committed) or a request about to be finished
            state.reemit = None
            drafting = METHODS[state.mode].drafting if state.args is not None else DRAFTER_COMP
            if drafting is None:
                continue  # Floor: no drafts, the verifier decodes alone
            if drafting.view == "x_full":
                y = state.committed(self.runner.requests[req_id].output_token_ids)
                state.full.commit(y)
                feed = state.full.pending(y)
                try:  # blocks for the feed and the K drafts (admission control keeps room for them)
                    self.pool.reserve(req_id, state.full.n_cached + len(feed) + state.K + 1)
                except AsymSpecError as e:
                    self.fail(req_id, state, e)
                    continue
                plan.full_rows.append((req_id, state, feed))
            else:
                plan.comp_rows.append((i, req_id, state))
        # shortest feeds first: attention backends that split decodes from prefills expect decodes first
        plan.full_rows.sort(key=lambda row: len(row[2]))
        return plan

    def full_view_images(self, plan: DraftPlan) -> FullViewImages | None:
        return full_view.full_view_images(self, plan)

    def propose(self, plan: DraftPlan, images: FullViewImages | None = None) -> dict[str, list[int]]:
        """Draft each row's K tokens: asymspec rows from x_full (with the image embeddings on their first
        pass), the others from x_comp. Returns req_id -> drafts."""
        drafts = {}
        if plan.full_rows:
            drafts.update(full_view.draft(self, plan.full_rows, images))
        if plan.comp_rows:
            drafts.update(comp_view.draft(self, plan.comp_rows))
        return drafts
