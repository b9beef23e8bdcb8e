"""Hidden tokens: the two tokens an asymspec step emits without a decision, and the client never sees.

Algorithm 1 drafts from y = [] and sends every emitted token through the gate. vLLM instead samples the first
output token from the prompt's prefill. So:
  prime    when a request arrives, the scheduler moves its prompt's last token (x_comp's last) to the output
           side (`prime`): the prefill covers x_comp minus that token and "emits" it again in place of a sample
           (`token_instead_of_sample`); the next step verifies [that token, d_1..d_K] as Algorithm 1's first
           step would. The proposer strips it from y (`committed`).
  re-emit  a request preempted for lack of KV-cache room is recomputed from its tokens; its last output token
           (whose KV was dropped with the rest) is held back (`hold_back_last_token`), the resumed prefill
           stops before it and emits it again (`note_resumed` marks the request on the worker), so the step
           after it drafts and verifies as before instead of taking a plain sample from the verifier.
The scheduler strips both from what the client receives (`strip_from_output`). What this module does not know:
the gate, the drafter's caches, admission control.
"""

from __future__ import annotations

import contextlib
import copy

import torch

PRIME_KEY = "asymspec_prime"  # SamplingParams.extra_args key: the prompt token the scheduler moved
# SamplingParams.extra_args key: the client's own `logprobs`, where prompt_logprobs made the engine compute more
CLIENT_LOGPROBS_KEY = "asymspec_client_logprobs"


# -- the scheduler's side ---------------------------------------------------------------------------
def prime(request) -> bool:
    """Move the prompt's last token of a new request to the output side; False when there is nothing to move
    (a one-token prompt, or a request whose prefill already started)."""
    ids = request.prompt_token_ids
    if ids is None or len(ids) < 2 or request.num_computed_tokens:
        return False
    params = copy.copy(
        request.sampling_params
    )  # in-process engines share the client's object: leave it alone
    params.extra_args = {**params.extra_args, PRIME_KEY: int(ids[-1])}
    if (
        params.prompt_logprobs is not None
    ):  # the moved token's prompt logprob comes back as its sample logprob
        params.extra_args[CLIENT_LOGPROBS_KEY] = params.logprobs
        params.logprobs = (
            -1
            if -1 in (params.logprobs, params.prompt_logprobs)
            else max(params.logprobs or 0, params.prompt_logprobs)
        )
    if params.max_tokens is not None:
        params.max_tokens += 1
    if params.min_tokens:
        params.min_tokens += 1
    request.sampling_params = params
    request.prompt_token_ids = list(ids[:-1])
    request._all_token_ids.pop()
    request.num_prompt_tokens -= 1
    request.max_tokens += 1
    request.block_hashes = []
    request.update_block_hashes()
    return True


def hold_back_last_token(request) -> None:
    """Drop the last output token of a preempted request (its KV is gone with the rest): the resumed
    prefill stops before it and the worker emits it again (the runner trims its copy to match)."""
    request._output_token_ids.pop()
    request._all_token_ids.pop()
    request.block_hashes = []
    request.update_block_hashes()


@contextlib.contextmanager
def prime_passes_stop_check(requests):
    """Around the scheduler's handling of a step's outputs: the prime token is the prompt's last token, not a
    decision, so vLLM's stop check must not end a request on it (Qwen's templates end prompts with "\n", a
    common stop token). vLLM's check_stop skips a request's outputs while num_output_tokens < min_tokens: for
    the step that emits the prime (a request's first output) min_tokens is at least 2, then restored (the
    workers never read it in between). requests: the scheduler's requests whose prime is still pending."""
    held = [
        (r, r.sampling_params.min_tokens) for r in requests if not r.num_output_tokens
    ]
    for request, min_tokens in held:
        request.sampling_params.min_tokens = max(min_tokens, 2)
    try:
        yield
    finally:
        for request, min_tokens in held:
            request.sampling_params.min_tokens = min_tokens


class Pending:
    """Which hidden token a request's next output starts with (scheduler side)."""

    def __init__(self, primed: bool):
        self.prime = primed
        self.reemit = (
            False  # a held-back token will come out of the resumed prefill again
        )


def strip_from_output(pending: Pending, tokens: list[int]) -> tuple[list[int], bool]:
    """The client's part of a step's new tokens, and whether a hidden token was taken off (that step made
    no decision: it is not counted in the statistics)."""
    if tokens and pending.prime:
        pending.prime = False
        return tokens[1:], True  # the moved prompt token
    if tokens and pending.reemit:
        pending.reemit = False
        return tokens[
            1:
        ], True  # the held-back token, already sent before the preemption
    return tokens, False


def move_logprobs(out, params, hidden: bool, primed: bool) -> None:
    """The sample logprobs of an EngineCoreOutput whose hidden token strip_from_output took off: that token's
    row goes too; the prime's row (the verifier's scores of the prompt's last token after the rest, the
    position vLLM's prompt logprobs lack since the prefill stopped before it) ends the prompt logprobs when
    they are asked. Rows the client did not ask for (prompt_logprobs raised the engine's `logprobs`) are dropped."""
    rows = out.new_logprobs
    if rows is None:  # the common step (this runs for every output): nothing to move
        return
    if hidden:
        from vllm.v1.outputs import LogprobsLists, LogprobsTensors  # lazy: loads vLLM

        if primed and params.prompt_logprobs is not None:
            width = (
                rows.logprobs.shape[1]
                if params.prompt_logprobs == -1
                else params.prompt_logprobs + 1
            )
            last = LogprobsTensors(
                torch.as_tensor(rows.logprob_token_ids[:1, :width]),
                torch.as_tensor(rows.logprobs[:1, :width]),
                torch.as_tensor(rows.sampled_token_ranks[:1]),
            )
            before = out.new_prompt_logprobs_tensors
            out.new_prompt_logprobs_tensors = (
                last
                if before is None
                else LogprobsTensors(
                    *(
                        torch.cat([old, new.to(old.dtype)])
                        for old, new in zip(before[:3], last)
                    )
                )
            )
        rows = LogprobsLists(
            rows.logprob_token_ids[1:], rows.logprobs[1:], rows.sampled_token_ranks[1:]
        )
    if (
        CLIENT_LOGPROBS_KEY in (params.extra_args or {})
        and params.extra_args[CLIENT_LOGPROBS_KEY] is None
    ):
        rows = None
    out.new_logprobs = rows


# -- the worker's side ------------------------------------------------------------------------------
def committed(prime_token: int | None, output_token_ids) -> list[int]:
    """y of Algorithm 1: the request's output tokens without the prime token."""
    return list(output_token_ids[1:] if prime_token is not None else output_token_ids)


def token_instead_of_sample(state, output_token_ids) -> int | None:
    """The token this step emits instead of a decision: the held-back token of a resumed prefill, or the
    prime token on a primed request's first step (a prefill that ends a request's prompt)."""
    if state.reemit is not None and len(output_token_ids) == state.reemit[1]:
        return state.reemit[0]
    if state.prime is not None and not output_token_ids:
        return state.prime
    return None


def note_resumed(rows: dict, cached_reqs, requests: dict) -> int:
    """Before the runner aligns its state with a scheduler step: a resumed request whose output the scheduler
    shortened by one token had that token held back at its preemption; its resumed prefill emits it again
    (RowState.reemit = (token, outputs before it)). cached_reqs: SchedulerOutput.scheduled_cached_reqs.
    Returns how many requests resumed so."""
    resumed = cached_reqs.resumed_req_ids
    if not resumed:
        return 0  # the common step: nothing resumes
    count = 0
    for i, req_id in enumerate(cached_reqs.req_ids):
        request, n_out = requests.get(req_id), cached_reqs.num_output_tokens[i]
        if req_id not in resumed or request is None or req_id not in rows:
            continue
        if (
            rows[req_id].request is not None
            and len(request.output_token_ids) == n_out + 1
        ):
            rows[req_id].reemit = (int(request.output_token_ids[-1]), n_out)
            count += 1
    return count
