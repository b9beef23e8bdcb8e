"""Scheduler hooks for speculative method "asymspec" (engine-core process); each calls vLLM's own method
for every other configuration (update_from_output also fails a plain engine's dead ends, below).

  add_request         a request with extra_args["asymspec"] is parsed, once (request_args.parse_request), and
                      gets its scheduler-side state: statistics, its share of the x_full pool, its prime token
                      (hidden_tokens.prime); the parsed AsymSpecRequest goes to the workers in its extra_args.
                      One that is malformed, or whose x_full view could never fit the pool, fails at once, alone
  schedule            admission control for the drafter's x_full KV pool (drafter/full_view_pool.py): a new asymspec
  request
                      waits while the pool cannot hold its whole x_full view; and for the step's token budget:
                      no more requests run than can each verify K drafts in one step (`budget_room`)
  _free_request       returns a finished (or aborted) request's share of that pool
  _preempt_request    holds back the last output token of a preempted request (hidden_tokens)
  update_from_output  counts acceptance per request, strips the hidden tokens (which never advance a request's
                      grammar: grammar_patch.py), returns the statistics with
                      the finished output, and finishes with an error the requests the worker could not serve
                      (bad image inputs, malformed extra_args); the rest of the batch goes on. On a plain
                      engine: only the requests its workers failed (a structured output's dead end,
                      requests/plain_dead_ends.py) finish with their error, before vLLM reads the step
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

from asymspec_vl.core.errors import AsymSpecError

from ..drafter.full_view_pool import (
    FULL_VIEW_TOKENS_ENV,
    blocks_for,
    full_view_capacity,
)
from ..requests import hidden_tokens
from ..requests.pool_ledger import PoolLedger
from ..requests.request_args import (
    KEY,
    REQUEST_KEY,
    AsymSpecRequest,
    EngineFacts,
    engine_facts,
    has_request_args,
    parse_request,
)
from ..requests.stats import OUTPUT_KEY, EngineStats
from ._patching import install
from .config_patch import is_asymspec
from .grammar_patch import hidden_tokens_skip_grammar
from .runner_patch import CUT_ATTR, ERRORS_ATTR

logger = logging.getLogger(__name__)
STATE_ATTR = "asymspec_state"  # Request attribute holding its RequestState
SCHEDULER_ATTR = (
    "asymspec"  # Scheduler attribute holding its SchedulerState (asymspec engines only)
)


@dataclass
class SchedulerState:
    """What an asymspec engine's scheduler keeps beside vLLM's: attached once, in __init__."""

    facts: EngineFacts  # what requests are parsed against
    pool: PoolLedger  # the x_full pool's blocks held by the running requests
    rejected: list = field(
        default_factory=list
    )  # (client, req_id, info) failed at admission, not yet output

    def take_rejected(self) -> list:
        rejected, self.rejected = self.rejected, []
        return rejected


class RequestState:
    """The scheduler's view of one asymspec request."""

    def __init__(self, K: int, mode: str, primed: bool, full_view_blocks: int):
        """mode: the request's method name ("invalid" for one that did not parse)."""
        self.stats = EngineStats(K, mode)
        self.hidden = hidden_tokens.Pending(primed)
        self.full_view_blocks = (
            full_view_blocks  # x_full pool blocks the request may come to hold
        )


def patch_scheduler() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler  # lazy: loads vLLM

    for name, hook in (
        ("__init__", init),
        ("add_request", add_request),
        ("schedule", schedule),
        ("_free_request", free_request),
        ("_preempt_request", preempt_request),
        ("update_from_output", update_from_output),
    ):
        install(Scheduler, name, hook)


def init(original, scheduler, *args, **kwargs) -> None:
    original(scheduler, *args, **kwargs)
    if is_asymspec(
        scheduler.vllm_config
    ):  # the KV cache config is final: the workers' pool has this size
        setattr(
            scheduler,
            SCHEDULER_ATTR,
            SchedulerState(
                engine_facts(scheduler.vllm_config),
                PoolLedger(*full_view_capacity(scheduler.vllm_config)),
            ),
        )


def add_request(original, scheduler, request):
    params = request.sampling_params
    if not (
        is_asymspec(scheduler.vllm_config)
        and params is not None
        and has_request_args(params.extra_args)
    ):
        return original(scheduler, request)
    side = getattr(scheduler, SCHEDULER_ATTR)
    pool = side.pool
    try:  # host-side checks on the request's own inputs, once, for every rank
        parsed, error = parse_request(params, side.facts), None
    except (AsymSpecError, ValueError, TypeError) as e:
        parsed, error = None, f"{type(e).__name__}: {e}"
    blocks = (
        full_view_blocks(request, parsed, scheduler.num_spec_tokens, pool.block_size)
        if parsed is not None
        else 0
    )
    if parsed is not None:
        to_workers(request, parsed)
    primed = parsed is not None and hidden_tokens.prime(request)
    K, mode = (
        (parsed.K, parsed.method.name)
        if parsed is not None
        else (scheduler.num_spec_tokens, "invalid")
    )
    state = RequestState(K, mode, primed, blocks)
    setattr(request, STATE_ATTR, state)
    original(scheduler, request)
    if error is None and not pool.could_ever_fit(blocks):
        error = (
            f"PoolExhaustedError: this request's x_full view needs {blocks} blocks of {pool.block_size} "
            f"tokens; the drafter's x_full KV pool has {pool.usable} (set {FULL_VIEW_TOKENS_ENV} higher)"
        )
    if error is not None:  # fail it now, alone
        from vllm.v1.request import RequestStatus  # lazy: loads vLLM

        logger.warning("asymspec: request %s failed: %s", request.request_id, error)

        side.rejected.append(
            (
                request.client_index,
                request.request_id,
                {**state.stats.to_dict(), "error": error},
            )
        )
        scheduler.finish_requests(request.request_id, RequestStatus.FINISHED_ERROR)
    return None


def to_workers(request, parsed: AsymSpecRequest) -> None:
    """The parsed request rides to the workers in place of its wire form (SchedulerOutput carries the
    SamplingParams; multiprocessing pickles them, Method by name)."""
    params = copy.copy(
        request.sampling_params
    )  # in-process engines share the client's object: leave it alone
    params.extra_args = {
        **{k: v for k, v in params.extra_args.items() if k != KEY},
        REQUEST_KEY: parsed,
    }
    request.sampling_params = params


def schedule(original, scheduler):
    """vLLM's schedule with the waiting requests whose x_full view does not fit the pool held back."""
    if not is_asymspec(scheduler.vllm_config):
        return original(scheduler)
    side = getattr(scheduler, SCHEDULER_ATTR)
    pool = side.pool
    held_ids = pool.held_back(
        [
            (r.request_id, getattr(getattr(r, STATE_ATTR, None), "full_view_blocks", 0))
            for r in scheduler.waiting
        ]
    )
    room = budget_room(
        scheduler.max_num_scheduled_tokens, side.facts.K, len(scheduler.running)
    )
    startable = [
        r.request_id for r in scheduler.waiting if r.request_id not in held_ids
    ]
    held_ids |= set(startable[room:])
    held = [request for request in scheduler.waiting if request.request_id in held_ids]
    if held:
        scheduler.waiting.remove_requests(held)
    try:
        output = original(scheduler)
    finally:
        for request in reversed(held):
            scheduler.waiting.prepend_request(request)
    for new in output.scheduled_new_reqs:
        state = getattr(scheduler.requests.get(new.req_id), STATE_ATTR, None)
        pool.admit(new.req_id, state.full_view_blocks if state is not None else 0)
    return output


def budget_room(token_budget: int, K: int, running: int) -> int:
    """How many waiting requests may start now. vLLM's scheduler gives each running request min(1 + its drafts,
    the budget left) tokens, so once the running requests' decode steps exceed the step's token budget the last
    ones verify fewer drafts than they proposed (or none): a rule that decides on fewer drafts than Algorithm 1's
    K changes AsymSpec's tokens (the first GPU-shaped stress run, seed 107: budget 32, 8 sequences, K 5). Running
    requests come first in vLLM's running queue and a prefilling one is always last, so keeping running * (K + 1)
    within the budget keeps every decode whole. One request always may run."""
    return max(token_budget // (K + 1) - running, 0 if running else 1)


def free_request(original, scheduler, request, delay_free_blocks: bool = False):
    side = getattr(scheduler, SCHEDULER_ATTR, None)
    if side is not None:
        side.pool.release(request.request_id)
    return original(scheduler, request, delay_free_blocks)


def preempt_request(original, scheduler, request, timestamp) -> None:
    original(scheduler, request, timestamp)
    state = getattr(request, STATE_ATTR, None)
    if (
        is_asymspec(scheduler.vllm_config)
        and state is not None
        and request.num_output_tokens
        and not state.hidden.reemit
    ):  # preempted again before its resumed prefill ended: already held
        hidden_tokens.hold_back_last_token(request)
        state.hidden.reemit = True


def update_from_output(original, scheduler, scheduler_output, runner_output):
    if not is_asymspec(scheduler.vllm_config):
        return plain_update_from_output(
            original, scheduler, scheduler_output, runner_output
        )
    requests = {
        req_id: scheduler.requests.get(req_id)
        for req_id in scheduler_output.num_scheduled_tokens
    }
    failed = finish_failed(scheduler, getattr(runner_output, ERRORS_ATTR, None) or {})
    steps = step_counts(scheduler_output, runner_output)
    states = {req_id: getattr(r, STATE_ATTR, None) for req_id, r in requests.items()}
    priming = [
        requests[req_id]
        for req_id, state in states.items()
        if state is not None and state.hidden.prime
    ]
    hidden = [
        requests[req_id]
        for req_id, state in states.items()
        if state is not None and (state.hidden.prime or state.hidden.reemit)
    ]
    with (
        hidden_tokens.prime_passes_stop_check(priming),
        hidden_tokens_skip_grammar(scheduler, hidden),
    ):
        outputs = original(scheduler, scheduler_output, runner_output)
    for engine_outputs in outputs.values():
        engine_outputs.outputs = [
            out
            for out in engine_outputs.outputs
            if account(out, requests.get(out.request_id), steps)
        ]
    add_error_outputs(
        outputs, failed + getattr(scheduler, SCHEDULER_ATTR).take_rejected()
    )
    return outputs


def plain_update_from_output(original, scheduler, scheduler_output, runner_output):
    """A plain engine's step: the requests its workers failed (a structured output's dead end,
    requests/plain_dead_ends.py) finish with their error first, so vLLM never appends the token its Sampler chose
    there nor feeds it to the grammar; the rest as vLLM does."""
    errors = getattr(runner_output, ERRORS_ATTR, None)
    if not errors:
        return original(scheduler, scheduler_output, runner_output)
    failed = finish_failed(scheduler, errors)
    outputs = original(scheduler, scheduler_output, runner_output)
    add_error_outputs(outputs, failed)
    return outputs


def full_view_blocks(
    request, parsed: AsymSpecRequest, engine_K: int, block_size: int
) -> int:
    """Pool blocks a request's x_full view can grow to: prompt + max_tokens + K + 1, at the engine's K (its
    request's K is at most that); none for a method that does not draft on x_full. A cross-family request's
    own x_comp view (x_comp_drafter, in the same pool) counts alike."""
    blocks = 0
    if parsed.reads_full_view:
        length = max(
            len(parsed.x_full), len(request.prompt_token_ids or ())
        )  # x_comp when the length gate is off
        blocks += blocks_for(length + request.max_tokens + engine_K + 1, block_size)
    if parsed.x_comp_drafter is not None and parsed.reads_drafter_comp:
        length = len(parsed.x_comp_drafter)
        blocks += blocks_for(length + request.max_tokens + engine_K + 1, block_size)
    return blocks


def step_counts(scheduler_output, runner_output) -> dict[str, tuple[int, int]]:
    """req_id -> (drafts verified, accepted + 1) of this step, before any stop cut: a step cut at a grammar's
    dead end (grammar_dead_end.py) committed its accepted drafts and no emitted token."""
    steps = {}
    sampled = runner_output.sampled_token_ids or []
    cut = getattr(runner_output, CUT_ATTR, None) or ()
    for req_id, index in runner_output.req_id_to_index.items():
        generated = sampled[index] if index < len(sampled) else []
        if generated:
            drafts = scheduler_output.scheduled_spec_decode_tokens.get(req_id) or ()
            steps[req_id] = (len(drafts), len(generated) + (req_id in cut))
    return steps


def account(out, request, steps) -> bool:
    """Update the request's statistics from one EngineCoreOutput; False drops an output left empty."""
    state = getattr(request, STATE_ATTR, None) if request is not None else None
    if state is None:
        return True
    primed = state.hidden.prime
    out.new_token_ids, hidden = hidden_tokens.strip_from_output(
        state.hidden, list(out.new_token_ids)
    )
    hidden_tokens.move_logprobs(out, request.sampling_params, hidden, primed and hidden)
    step = steps.get(out.request_id)
    if step is not None and not hidden:
        state.stats.record(step[0], step[1], len(out.new_token_ids))
    if out.finish_reason is not None:
        out.kv_transfer_params = {
            **(out.kv_transfer_params or {}),
            OUTPUT_KEY: state.stats.to_dict(),
        }
        return True
    return bool(out.new_token_ids) or out.new_prompt_logprobs_tensors is not None


def finish_failed(scheduler, errors: dict[str, str]) -> list:
    """Finish with an error the requests the workers failed this step: (client, req_id, info) of each."""
    from vllm.v1.request import RequestStatus  # lazy: loads vLLM

    failed = []
    for req_id, message in errors.items():
        request = scheduler.requests.get(req_id)
        if request is None or request.is_finished():
            continue
        state = getattr(request, STATE_ATTR, None)
        stats = state.stats.to_dict() if state is not None else {}
        failed.append((request.client_index, req_id, {**stats, "error": message}))
        scheduler.finish_requests(req_id, RequestStatus.FINISHED_ERROR)
        # vLLM's server answers finish_reason "error" with a bare 500 and reads no kv_transfer_params: the log says why
        logger.warning("asymspec: request %s failed: %s", req_id, message)
    return failed


def add_error_outputs(outputs: dict, failed: list) -> None:
    from vllm.v1.engine import (
        EngineCoreOutput,
        EngineCoreOutputs,
        FinishReason,
    )  # lazy: loads vLLM

    for client, req_id, info in failed:
        engine_outputs = outputs.setdefault(client, EngineCoreOutputs())
        engine_outputs.outputs.append(
            EngineCoreOutput(
                request_id=req_id,
                new_token_ids=[],
                finish_reason=FinishReason.ERROR,
                kv_transfer_params={OUTPUT_KEY: info},
            )
        )
