"""GPUModelRunner (and so CPUModelRunner) hooks for speculative method "asymspec". Each hook is a no-op
wrapper for every other configuration.

  __init__                   the runner builds an AsymSpecProposer where it would build a DraftModelProposer
  _update_states             the proposer forgets finished requests (their caches and blocks) and notes
                             preempted ones that resume with a held-back token (rows.RowState.reemit)
  _prepare_inputs            keeps this step's logits_indices (the token index of every logits row)
  _build_attention_metadata  keeps this step's common attention metadata for the drafter's KV group (the
                             x_comp pass plans its own metadata from it: drafter_attention.py)
  _model_forward             after the verifier's forward, the drafter's x_comp-view pass on the same inputs
  _sample                    sampler.sample: the gate in place of the rejection sampler
  propose_draft_token_ids    commit, route the cached image embeddings (patch 4), draft
  sample_tokens              tensor-parallel ranks agree on this step's failed requests (faults.py); those
                             requests ride out on the ModelRunnerOutput
  profile_run                the drafter's vision tower on the largest image, inside vLLM's memory profile
"""

from __future__ import annotations

import copy

from . import sampler, switches
from ._patching import wrap
from .config_patch import is_asymspec
from .drafter_attention import verifier_common_for_group
from .faults import check_ranks_agree, stop_rank_on_error
from .timing import timed

ERRORS_ATTR = "asymspec_errors"  # ModelRunnerOutput attribute: req_id -> "ErrorType: message"


def patch_model_runner() -> None:
    from vllm.v1.worker import gpu_model_runner as gmr

    cls = gmr.GPUModelRunner

    def make_init(orig):
        def __init__(self, vllm_config, device):
            if not is_asymspec(vllm_config):
                return orig(self, vllm_config, device)
            from .proposer import AsymSpecProposer

            stock = gmr.DraftModelProposer
            gmr.DraftModelProposer = AsymSpecProposer  # the class the runner instantiates for draft models
            try:
                orig(self, vllm_config, device)
            finally:
                gmr.DraftModelProposer = stock
            self._asymspec_live = False  # True inside execute_model (not in dummy / profiling runs)
            self._asymspec_logits_indices = None
        return __init__

    def make_update_states(orig):
        def _update_states(self, scheduler_output):
            if is_asymspec(self.vllm_config):
                self.drafter.registry.forget(scheduler_output.finished_req_ids)
                self.drafter.registry.note_resumed(scheduler_output.scheduled_cached_reqs, self.requests)
            return orig(self, scheduler_output)
        return _update_states

    def make_execute_model(orig):
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            if not is_asymspec(self.vllm_config):
                return orig(self, scheduler_output, intermediate_tensors)
            self._asymspec_live = True
            try:
                return orig(self, scheduler_output, intermediate_tensors)
            finally:
                self._asymspec_live = False
        return execute_model

    def make_prepare_inputs(orig):
        def _prepare_inputs(self, *args, **kwargs):
            result = orig(self, *args, **kwargs)
            if is_asymspec(self.vllm_config):
                self._asymspec_logits_indices = result[0]
            return result
        return _prepare_inputs

    def make_build_attention_metadata(orig):
        def _build_attention_metadata(self, *args, **kwargs):
            result = orig(self, *args, **kwargs)
            if is_asymspec(self.vllm_config) and self._asymspec_live:
                self.drafter.verifier_common = verifier_common_for_group(
                    result[1], self, self.drafter.kv_cache_gid, kwargs.get("slot_mappings"))
            return result
        return _build_attention_metadata

    def make_model_forward(orig):
        def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None,
                           inputs_embeds=None, **model_kwargs):
            if not (is_asymspec(self.vllm_config) and self._asymspec_live):
                return orig(self, input_ids, positions, intermediate_tensors, inputs_embeds, **model_kwargs)
            if input_ids is None:
                raise RuntimeError("speculative method 'asymspec' needs a token-id (text-only) verifier")
            with timed(self, "verifier"):
                out = orig(self, input_ids, positions, intermediate_tensors, inputs_embeds, **model_kwargs)
            with timed(self, "base_pass"), stop_rank_on_error(self.drafter.world_size, "the x_comp pass"):
                self.drafter.score_comp_view(input_ids, positions)
            return out
        return _model_forward

    def make_sample(orig):
        def _sample(self, logits, spec_decode_metadata):
            if not is_asymspec(self.vllm_config):
                return orig(self, logits, spec_decode_metadata)
            self.input_batch.update_async_output_token_ids()
            timer = getattr(self, "_asymspec_timer", None)
            if timer is not None:
                timer.steps += 1
            with timed(self, "gate"):
                return sampler.sample(self, logits, spec_decode_metadata, self._asymspec_logits_indices,
                                      lambda lg, meta: orig(self, lg, meta))
        return _sample

    def make_propose(orig):
        def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, *args, **kwargs):
            if not is_asymspec(self.vllm_config):
                return orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
            req_ids = list(self.input_batch.req_ids)
            with timed(self, "draft"), stop_rank_on_error(self.drafter.world_size, "drafting"):
                plan = self.drafter.plan(req_ids, sampled_token_ids)
                # patch (4); off, the drafter's x_full prefill embeds the image_pad tokens as text
                images = self.drafter.full_view_images(plan) if switches.enabled("mm_embeds") else None
                drafts = self.drafter.propose(plan, images)
            return [drafts.get(req_id, []) for req_id in req_ids]  # host lists: no device copy needed
        return propose_draft_token_ids

    def make_sample_tokens(orig):
        def sample_tokens(self, grammar_output):
            output = orig(self, grammar_output)
            if is_asymspec(self.vllm_config) and output is not None and hasattr(output, "req_ids"):
                if self.drafter.world_size > 1:
                    from vllm.distributed import get_tp_group

                    check_ranks_agree(get_tp_group(), list(self.drafter.registry.errors))
                errors = self.drafter.registry.take_errors()
                if errors:
                    output = copy.copy(output)  # never mark vLLM's shared EMPTY_MODEL_RUNNER_OUTPUT
                    setattr(output, ERRORS_ATTR, errors)
            return output
        return sample_tokens

    def make_profile_run(orig):
        def profile_run(self):
            if is_asymspec(self.vllm_config):
                self.drafter.profile_vision_tower()  # its activations peak before the decoder's dummy run
            return orig(self)
        return profile_run

    wrap(cls, "__init__", make_init)
    wrap(cls, "_update_states", make_update_states)
    wrap(cls, "execute_model", make_execute_model)
    wrap(cls, "_prepare_inputs", make_prepare_inputs)
    wrap(cls, "_build_attention_metadata", make_build_attention_metadata)
    wrap(cls, "_model_forward", make_model_forward)
    wrap(cls, "_sample", make_sample)
    wrap(cls, "propose_draft_token_ids", make_propose)
    wrap(cls, "sample_tokens", make_sample_tokens)
    wrap(cls, "profile_run", make_profile_run)
