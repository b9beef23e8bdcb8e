"""GPUModelRunner (and so CPUModelRunner) hooks for speculative method "asymspec". Each hook is a no-op
wrapper for every other configuration; for asymspec it calls one method of the proposer (`runner.drafter`, an
AsymSpecProposer, which owns the step's state) or the sampler, in step order:

  __init__                   the runner builds an AsymSpecProposer where it would build a DraftModelProposer
  _update_states             proposer.on_scheduled: finished requests forgotten, preempted ones' drafts dropped,
                             resumed ones noted (rows.RowState.reemit)
  _prepare_inputs            keeps this step's logits_indices (the token index of every logits row; RunnerState)
  _build_attention_metadata  proposer.keep_verifier_metadata: this step's common attention metadata for the
                             drafter's KV group (the x_comp pass plans its own metadata from it)
  _model_forward             proposer.after_verifier: after the verifier's forward, the drafter's x_comp-view
                             pass on the same inputs
  _sample                    sampler.sample: the gate in place of the rejection sampler, on the step's tensors
                             and batch, reading the drafter's logits from the proposer (a failure there ends
                             the rank under tensor parallelism, as in the drafter's passes: faults.py)
                             (on every other engine: logprob_support.restrict, the rows whose logprobs are
                             over a support, a cross-family drafter alone's)
  propose_draft_token_ids    proposer.draft: commit, route the cached image embeddings (patch 4), draft
  sample_tokens              proposer.take_errors: tensor-parallel ranks agree on this step's failed requests
                             (faults.py); those requests ride out on the ModelRunnerOutput, with the rows whose
                             step committed its accepted drafts only (grammar_dead_end.py)
                             (on every other engine: the structured rows its Sampler left with no token fail
                             alone, plain_dead_ends.py / plain_sampler_patch.py)
  profile_run                proposer.profile_vision_tower: the drafter's vision tower on the largest image,
                             inside vLLM's memory profile
  _dummy_sampler_run         after vLLM's own sampler and rejection sampler, this engine's sampler on
                             max_num_seqs dummy rows at the engine's K (sampler_profile.py, profile_sampler): in the
                             profile run, so that vLLM's memory profile, which sizes the KV cache, counts the peak of
                             its rules (vLLM's profile never runs them); vLLM calls it again to warm its sampler up
                             once the KV cache is allocated
"""

from __future__ import annotations

import copy

import torch

from .. import sampler, sampler_profile
from ..probes.phase_timing import timed
from ..requests import logprob_support, plain_dead_ends
from ..requests.faults import stop_rank_on_error
from ._patching import install
from .config_patch import is_asymspec
from .log_notes import asymspec_log_lines
from .plain_sampler_patch import with_errors
from .runner_state import RUNNER_ATTR, RunnerState

ERRORS_ATTR = (
    "asymspec_errors"  # ModelRunnerOutput attribute: req_id -> "ErrorType: message"
)
# ModelRunnerOutput attribute: the req_ids whose step committed its accepted drafts only (grammar_dead_end.py)
CUT_ATTR = "asymspec_cut_steps"


def patch_model_runner() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # lazy: loads vLLM

    for name, hook in (
        ("__init__", init),
        ("_update_states", update_states),
        ("execute_model", execute_model),
        ("_prepare_inputs", prepare_inputs),
        ("_build_attention_metadata", build_attention_metadata),
        ("_model_forward", model_forward),
        ("_sample", sample),
        ("propose_draft_token_ids", propose),
        ("sample_tokens", sample_tokens),
        ("profile_run", profile_run),
        ("_dummy_sampler_run", dummy_sampler_run),
    ):
        install(GPUModelRunner, name, hook)


def init(original, runner, vllm_config, device) -> None:
    if not is_asymspec(vllm_config):
        return original(runner, vllm_config, device)
    from vllm.v1.worker import gpu_model_runner  # lazy: loads vLLM

    from ..drafter.proposer import AsymSpecProposer  # lazy: loads vLLM

    stock = gpu_model_runner.DraftModelProposer
    gpu_model_runner.DraftModelProposer = (
        AsymSpecProposer  # the class the runner instantiates for draft models
    )
    try:
        with (
            asymspec_log_lines()
        ):  # vLLM's "min_p ... won't work with speculative decoding" is untrue here
            original(runner, vllm_config, device)
    finally:
        gpu_model_runner.DraftModelProposer = stock
    setattr(runner, RUNNER_ATTR, RunnerState())


def update_states(original, runner, scheduler_output):
    if is_asymspec(runner.vllm_config):
        runner.drafter.on_scheduled(scheduler_output)
    return original(runner, scheduler_output)


def execute_model(original, runner, scheduler_output, intermediate_tensors=None):
    if not is_asymspec(runner.vllm_config):
        return original(runner, scheduler_output, intermediate_tensors)
    runner.asymspec.live = True
    try:
        return original(runner, scheduler_output, intermediate_tensors)
    finally:
        runner.asymspec.live = False


def prepare_inputs(original, runner, *args, **kwargs):
    result = original(runner, *args, **kwargs)
    if is_asymspec(runner.vllm_config):
        runner.asymspec.logits_indices = result[0]
    return result


def build_attention_metadata(original, runner, *args, **kwargs):
    result = original(runner, *args, **kwargs)
    if is_asymspec(runner.vllm_config) and runner.asymspec.live:
        runner.drafter.keep_verifier_metadata(result[1], kwargs.get("slot_mappings"))
    return result


def model_forward(
    original,
    runner,
    input_ids=None,
    positions=None,
    intermediate_tensors=None,
    inputs_embeds=None,
    **model_kwargs,
):
    if not (is_asymspec(runner.vllm_config) and runner.asymspec.live):
        return original(
            runner,
            input_ids,
            positions,
            intermediate_tensors,
            inputs_embeds,
            **model_kwargs,
        )
    if input_ids is None:
        raise RuntimeError(
            "speculative method 'asymspec' needs a token-id (text-only) verifier"
        )
    with timed(runner, "verifier"):
        out = original(
            runner,
            input_ids,
            positions,
            intermediate_tensors,
            inputs_embeds,
            **model_kwargs,
        )
    with timed(runner, "base_pass"):
        return runner.drafter.after_verifier(out, input_ids, positions)


def sample(original, runner, logits, spec_decode_metadata):
    if not is_asymspec(runner.vllm_config):
        # a plain engine: rows whose logprobs have a support (a cross-family drafter alone's)
        logprob_support.restrict(runner, logits)
        return original(runner, logits, spec_decode_metadata)
    runner.input_batch.update_async_output_token_ids()
    if runner.asymspec.timer is not None:
        runner.asymspec.timer.steps += 1
    # first-sight row(), b's compute_logits and the rules run collectives or may fail on one rank alone
    with (
        timed(runner, "gate"),
        stop_rank_on_error(runner.drafter.world_size, "the sampler"),
    ):
        return sampler.sample(
            runner.drafter,
            sampler.StepBatch.of(runner.input_batch, runner.requests),
            logits,
            spec_decode_metadata,
            runner.asymspec.logits_indices,
            lambda lg, meta: original(runner, lg, meta),
            runner.sampler,
        )


def propose(original, runner, scheduler_output, sampled_token_ids, *args, **kwargs):
    if not is_asymspec(runner.vllm_config):
        return original(runner, scheduler_output, sampled_token_ids, *args, **kwargs)
    with timed(runner, "draft"):
        return runner.drafter.draft(
            list(runner.input_batch.req_ids), sampled_token_ids
        )  # host lists


def sample_tokens(original, runner, grammar_output):
    if not is_asymspec(runner.vllm_config):
        # a plain engine: a structured row left with no token fails alone (requests/plain_dead_ends.py)
        watch = plain_dead_ends.watch(runner, grammar_output)
        try:
            output = original(runner, grammar_output)
        finally:
            plain_dead_ends.unwatch(runner)
        return with_errors(output, watch, ERRORS_ATTR)
    output = original(runner, grammar_output)
    if (
        is_asymspec(runner.vllm_config)
        and output is not None
        and hasattr(output, "req_ids")
    ):
        errors = runner.drafter.take_errors()
        cut = runner.drafter.take_cut_steps()
        if errors or cut:
            output = copy.copy(
                output
            )  # never mark vLLM's shared EMPTY_MODEL_RUNNER_OUTPUT
            setattr(output, ERRORS_ATTR, errors)
            setattr(output, CUT_ATTR, cut)
    return output


def profile_run(original, runner):
    if is_asymspec(runner.vllm_config):
        runner.drafter.profile_vision_tower()  # its activations peak before the decoder's dummy run
    return original(runner)


def dummy_sampler_run(original, runner, hidden_states):
    output = original(runner, hidden_states)
    if is_asymspec(runner.vllm_config):
        profile_sampler(runner, hidden_states)
    return output


def profile_sampler(runner, hidden_states: torch.Tensor) -> None:
    """This engine's sampler at its largest step, on dummy rows (sampler_profile.py): max_num_seqs rows with the
    engine's K drafts each (fewer where the token budget cannot hold K + 1 tokens a row), the verifier's logits
    from its own compute_logits on random hidden states (of hidden_states' width and dtype) as a step's, the
    drafter's vocabulary and dtype those of its stored logits a, every row asking for vLLM's max_logprobs, each
    rule of sampler_profile.PROFILED in turn. No request is read or changed."""
    drafter = runner.drafter
    rows = min(runner.max_num_reqs, runner.max_num_tokens)
    n = max(0, min(drafter.K, runner.max_num_tokens // rows - 1))
    hidden = torch.rand(
        rows * (n + 1),
        hidden_states.shape[-1],
        dtype=hidden_states.dtype,
        device=hidden_states.device,
    )
    logits = runner.model.compute_logits(hidden)  # [rows * (n + 1), Vv]
    del hidden
    stored = drafter.full.draft_logits.logits  # [S, K + 1, Vd]
    max_logprobs = runner.model_config.max_logprobs
    num_logprobs = logits.shape[-1] if max_logprobs < 0 else max_logprobs
    for method, samples, bonus in sampler_profile.PROFILED:
        sampler_profile.dummy_step(
            method,
            samples,
            logits,
            n,
            stored.shape[-1],
            stored.dtype,
            runner.sampler,
            num_logprobs,
            drafter.vmap,
            bonus,
        )
