"""Scheduler hooks for speculative method "asymspec" (engine-core process).

  add_request         primes a request that carries extra_args["asymspec"]: its prompt's last token
                      (x_comp's last) moves to the output side, so the first step prefills x_comp minus that
                      token and the next verifies [that token, d_1..d_K] -- the first emitted token then goes
                      through the gate like every other (Algorithm 1 drafts from y = []), not through a plain
                      prefill sample. The client never sees the moved token.
  schedule            admission control for the drafter's x_full KV pool (kv_pool): a new asymspec
                      request waits while the pool cannot hold its whole x_full view (one that could never
                      fit fails at once, alone)
  _free_request       returns a finished (or aborted) request's share of that pool
  _preempt_request    holds back the last output token of a preempted request (rows.RowState.reemit): the
                      resumed prefill covers the rest and emits that token again, so the step after it
                      drafts and verifies as Algorithm 1 would have (not a plain sample from the verifier)
  update_from_output  counts acceptance per request, hides the moved and re-emitted tokens, returns the statistics with
                      the finished output, and finishes with an error the requests the worker could not
                      serve (bad image inputs, malformed extra_args) -- the rest of the batch goes on.
"""

from __future__ import annotations

import copy

from ._patching import wrap
from .config_patch import is_asymspec
from .kv_pool import FULL_VIEW_TOKENS_ENV, blocks_for, full_view_capacity
from .request_args import RequestArgsError, has_request_args, raw_args, request_K, request_mode
from .rows import PRIME_KEY
from .runner_patch import ERRORS_ATTR
from .stats import OUTPUT_KEY, EngineStats

STATE_ATTR = "asymspec_state"


class _RequestState:
    def __init__(self, K: int, mode: str, prime_pending: bool, full_view_blocks: int):
        self.stats = EngineStats(K, mode)
        self.prime_pending = prime_pending
        self.reemit_pending = False  # a held-back token will come out of the resumed prefill again
        self.full_view_blocks = full_view_blocks  # x_full pool blocks the request may come to hold


def patch_scheduler() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus

    def make_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            if is_asymspec(self.vllm_config):  # read once, as the workers read it once
                self._asymspec_capacity = full_view_capacity(self.vllm_config)
                self._asymspec_reserved = {}
                self._asymspec_peak = 0
                self._asymspec_rejected = []  # (client, req_id, info) failed at admission
        return __init__

    def make_add_request(orig):
        def add_request(self, request):
            sp = request.sampling_params
            if is_asymspec(self.vllm_config) and sp is not None and has_request_args(sp.extra_args):
                mode = request_mode(sp.extra_args)
                blocks = _full_view_blocks(request, mode, self.num_spec_tokens, self._asymspec_capacity[1])
                primed = _prime(request)
                state = _RequestState(request_K(sp.extra_args, self.num_spec_tokens), mode, primed, blocks)
                setattr(request, STATE_ATTR, state)
                orig(self, request)
                usable, block = self._asymspec_capacity
                if blocks > usable:  # could never be admitted: fail it now, alone
                    self._asymspec_rejected.append((request.client_index, request.request_id, {
                        **state.stats.to_dict(), "error": f"PoolExhaustedError: this request's x_full view needs "
                        f"{blocks} blocks of {block} tokens; the drafter's x_full KV pool has {usable} (set "
                        f"{FULL_VIEW_TOKENS_ENV} higher)"}))
                    self.finish_requests(request.request_id, RequestStatus.FINISHED_ERROR)
                return None
            return orig(self, request)
        return add_request

    def make_schedule(orig):
        def schedule(self):
            if not is_asymspec(self.vllm_config):
                return orig(self)
            reserved, capacity = self._asymspec_reserved, self._asymspec_capacity[0]
            free = capacity - sum(reserved.values())
            held = []
            for request in self.waiting:
                need = getattr(getattr(request, STATE_ATTR, None), "full_view_blocks", 0)
                if request.request_id in reserved or not need:
                    continue
                if need <= free:
                    free -= need
                else:
                    held.append(request)
            if held:
                self.waiting.remove_requests(held)
            try:
                out = orig(self)
            finally:
                for request in reversed(held):
                    self.waiting.prepend_request(request)
            for new in out.scheduled_new_reqs:
                state = getattr(self.requests.get(new.req_id), STATE_ATTR, None)
                if state is not None and state.full_view_blocks:
                    reserved[new.req_id] = state.full_view_blocks
            self._asymspec_peak = max(self._asymspec_peak, sum(reserved.values()))  # high-water mark (blocks)
            return out
        return schedule

    def make_free_request(orig):
        def _free_request(self, request, delay_free_blocks: bool = False):
            getattr(self, "_asymspec_reserved", {}).pop(request.request_id, None)
            return orig(self, request, delay_free_blocks)
        return _free_request

    def make_preempt_request(orig):
        def _preempt_request(self, request, timestamp):
            orig(self, request, timestamp)
            state = getattr(request, STATE_ATTR, None)
            if (is_asymspec(self.vllm_config) and state is not None and request.num_output_tokens
                    and not state.reemit_pending):  # preempted again before its resumed prefill ended
                _hold_back_last_token(request)
                state.reemit_pending = True
        return _preempt_request

    def make_update_from_output(orig):
        def update_from_output(self, scheduler_output, model_runner_output):
            if not is_asymspec(self.vllm_config):
                return orig(self, scheduler_output, model_runner_output)
            reqs = {rid: self.requests.get(rid) for rid in scheduler_output.num_scheduled_tokens}
            failed = _finish_failed(self, getattr(model_runner_output, ERRORS_ATTR, None) or {})
            steps = _steps(scheduler_output, model_runner_output)
            outputs = orig(self, scheduler_output, model_runner_output)
            for eco in outputs.values():
                eco.outputs = [o for o in eco.outputs if _account(o, reqs.get(o.request_id), steps)]
            _add_error_outputs(outputs, failed + self._asymspec_rejected)
            self._asymspec_rejected = []
            return outputs
        return update_from_output

    wrap(Scheduler, "__init__", make_init)
    wrap(Scheduler, "add_request", make_add_request)
    wrap(Scheduler, "schedule", make_schedule)
    wrap(Scheduler, "_free_request", make_free_request)
    wrap(Scheduler, "_preempt_request", make_preempt_request)
    wrap(Scheduler, "update_from_output", make_update_from_output)


def _full_view_blocks(request, mode: str, K: int, block_size: int) -> int:
    """Pool blocks an asymspec request's x_full view can grow to: prompt + max_tokens + K + 1."""
    if mode != "asymspec":
        return 0
    try:
        x_full = raw_args(request.sampling_params.extra_args).get("x_full")
        length = max(len(x_full), len(request.prompt_token_ids or ()))  # x_comp when the length gate is off
    except (RequestArgsError, TypeError):
        return 0  # malformed: the worker reports it
    return blocks_for(length + request.max_tokens + K + 1, block_size)


def _prime(request) -> bool:
    """Move the prompt's last token to the output side (see the module docstring)."""
    ids = request.prompt_token_ids
    if ids is None or len(ids) < 2 or request.num_computed_tokens:
        return False
    sp = copy.copy(request.sampling_params)  # in-process engines share the client's object: leave it alone
    sp.extra_args = {**sp.extra_args, PRIME_KEY: int(ids[-1])}
    if sp.max_tokens is not None:
        sp.max_tokens += 1
    if sp.min_tokens:
        sp.min_tokens += 1
    request.sampling_params = sp
    request.prompt_token_ids = list(ids[:-1])
    request._all_token_ids.pop()
    request.num_prompt_tokens -= 1
    request.max_tokens += 1
    request.block_hashes = []
    request.update_block_hashes()
    return True


def _hold_back_last_token(request) -> None:
    """Drop the last output token of a preempted request (its KV is gone with the rest): the resumed
    prefill stops before it and the worker emits it again (the runner trims its copy to match)."""
    request._output_token_ids.pop()
    request._all_token_ids.pop()
    request.block_hashes = []
    request.update_block_hashes()


def _steps(scheduler_output, runner_output) -> dict[str, tuple[int, int]]:
    """req_id -> (drafts verified, tokens committed) of this step, before any stop cut."""
    steps = {}
    sampled = runner_output.sampled_token_ids or []
    for req_id, idx in runner_output.req_id_to_index.items():
        generated = sampled[idx] if idx < len(sampled) else []
        if generated:
            steps[req_id] = (len(scheduler_output.scheduled_spec_decode_tokens.get(req_id) or ()), len(generated))
    return steps


def _account(out, request, steps) -> bool:
    """Update the request's statistics from one EngineCoreOutput; False drops an output left empty."""
    state = getattr(request, STATE_ATTR, None) if request is not None else None
    if state is None:
        return True
    tokens = list(out.new_token_ids)
    step = steps.get(out.request_id)
    if state.prime_pending and tokens:
        tokens, step, state.prime_pending = tokens[1:], None, False  # the moved prompt token
    elif state.reemit_pending and tokens:
        tokens, step, state.reemit_pending = tokens[1:], None, False  # the held-back token, already sent
    out.new_token_ids = tokens
    if step is not None:
        state.stats.record(step[0], step[1], len(tokens))
    if out.finish_reason is not None:
        out.kv_transfer_params = {**(out.kv_transfer_params or {}), OUTPUT_KEY: state.stats.to_dict()}
        return True
    return bool(tokens) or out.new_prompt_logprobs_tensors is not None


def _finish_failed(scheduler, errors: dict[str, str]) -> list:
    from vllm.v1.request import RequestStatus

    failed = []
    for req_id, message in errors.items():
        request = scheduler.requests.get(req_id)
        if request is None or request.is_finished():
            continue
        state = getattr(request, STATE_ATTR, None)
        stats = state.stats.to_dict() if state is not None else {}
        failed.append((request.client_index, req_id, {**stats, "error": message}))
        scheduler.finish_requests(req_id, RequestStatus.FINISHED_ERROR)
    return failed


def _add_error_outputs(outputs: dict, failed: list) -> None:
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

    for client, req_id, info in failed:
        eco = outputs.setdefault(client, EngineCoreOutputs())
        eco.outputs.append(EngineCoreOutput(request_id=req_id, new_token_ids=[], finish_reason=FinishReason.ERROR,
                                            kv_transfer_params={OUTPUT_KEY: info}))
