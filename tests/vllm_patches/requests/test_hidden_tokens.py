"""vllm_patches.requests.hidden_tokens on stand-in requests and vLLM's own logprobs types: the prime raises the
engine's `logprobs` to what the client asked of either kind, and move_logprobs takes the hidden token's row off the
sample logprobs (the other rows keep their own ranks), ends the prompt logprobs with the prime's row, and drops the
rows the client did not ask for."""

import numpy as np
import pytest
import torch

from vllm_patches.requests.hidden_tokens import (
    CLIENT_LOGPROBS_KEY,
    PRIME_KEY,
    move_logprobs,
    prime,
)


class Request:
    """The fields of vLLM's scheduler Request that prime reads and writes."""

    def __init__(self, params, prompt):
        self.sampling_params, self.prompt_token_ids = params, list(prompt)
        self._all_token_ids = list(prompt)
        self.num_prompt_tokens, self.num_computed_tokens = len(prompt), 0
        self.max_tokens, self.block_hashes = params.max_tokens, ["stale"]

    def update_block_hashes(self):
        self.block_hashes = [tuple(self._all_token_ids)]


def params(**kw):
    """An asymspec request's params: its parsed request rides in extra_args (a stand-in here)."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=8, extra_args={"asymspec_request": "parsed"}, **kw)


@pytest.mark.parametrize(
    "logprobs, prompt_logprobs, engine",
    [(5, 2, 5), (1, 3, 3), (None, 3, 3), (0, 0, 0), (4, -1, -1)],
)
def test_the_prime_asks_the_engine_for_the_larger_of_the_two_logprobs(
    logprobs, prompt_logprobs, engine
):
    """logprobs > prompt_logprobs: the client's sample rows need `logprobs` alternatives, the prime's row (its last
    prompt entry) prompt_logprobs; the engine computes the larger and the client's own number is kept."""
    client = params(logprobs=logprobs, prompt_logprobs=prompt_logprobs)
    request = Request(client, [7, 8, 9])
    assert prime(request)
    moved = request.sampling_params
    assert moved.logprobs == engine
    assert moved.extra_args[CLIENT_LOGPROBS_KEY] == logprobs
    assert moved.extra_args[PRIME_KEY] == 9 and moved.max_tokens == 9
    assert request.prompt_token_ids == [7, 8] and request.num_prompt_tokens == 2
    assert request.block_hashes == [(7, 8)]
    # the client's object is left alone (in-process engines share it)
    assert client.logprobs == logprobs and client.extra_args == {
        "asymspec_request": "parsed"
    }


def test_without_prompt_logprobs_the_client_logprobs_are_the_engines():
    request = Request(params(logprobs=3), [7, 8, 9])
    assert prime(request) and request.sampling_params.logprobs == 3
    assert CLIENT_LOGPROBS_KEY not in request.sampling_params.extra_args


class Output:
    """The fields of an EngineCoreOutput that move_logprobs reads and writes."""

    def __init__(self, rows, before=None):
        self.new_logprobs, self.new_prompt_logprobs_tensors = rows, before


def sample_rows(n: int, width: int):
    """vLLM's LogprobsLists of n output rows: row r holds ids 10r.. and logprobs -(r + c/10), its sampled token's
    rank r + 1 (distinct per row, so a shift shows)."""
    from vllm.v1.outputs import LogprobsLists

    ids = np.array([[10 * r + c for c in range(width)] for r in range(n)])
    lps = np.array([[-(r + c / 10) for c in range(width)] for r in range(n)])
    return LogprobsLists(ids, lps, np.arange(1, n + 1))


def prompt_rows(n: int, width: int):
    from vllm.v1.outputs import LogprobsTensors

    return LogprobsTensors(
        torch.arange(n * width).reshape(n, width),
        -torch.ones(n, width),
        torch.full((n,), 4),
    )


def engine_params(logprobs, prompt_logprobs):
    """The scheduler's copy of a request's params after prime."""
    request = Request(
        params(logprobs=logprobs, prompt_logprobs=prompt_logprobs), [1, 2, 3]
    )
    prime(request)
    return request.sampling_params


def test_the_prime_row_ends_the_prompt_logprobs_and_the_rest_keep_their_ranks():
    """The client asked logprobs=4 and prompt_logprobs=2: the prime's row (cut to 1 + 2 columns) follows the
    prefill's prompt rows, and the other sample rows keep their own ids, logprobs and ranks, untrimmed."""
    p = engine_params(4, 2)
    out = Output(sample_rows(3, 5), before=prompt_rows(2, 3))
    move_logprobs(out, p, hidden=True, primed=True)
    ids, lps, ranks = out.new_prompt_logprobs_tensors[:3]
    assert ids.tolist() == [[0, 1, 2], [3, 4, 5], [0, 1, 2]]
    assert lps[2].tolist() == pytest.approx([0.0, -0.1, -0.2])
    assert ranks.tolist() == [4, 4, 1]
    rows = out.new_logprobs
    assert rows.logprob_token_ids.tolist() == [
        [10, 11, 12, 13, 14],
        [20, 21, 22, 23, 24],
    ]
    assert rows.logprobs[:, 0].tolist() == [-1.0, -2.0]
    assert rows.sampled_token_ranks.tolist() == [2, 3]


def test_the_first_prompt_rows_of_a_request_may_be_the_prime_alone():
    p = engine_params(None, 1)
    out = Output(sample_rows(1, 2))
    move_logprobs(out, p, hidden=True, primed=True)
    ids, _, ranks = out.new_prompt_logprobs_tensors[:3]
    assert ids.tolist() == [[0, 1]] and ranks.tolist() == [1]
    assert out.new_logprobs is None  # the client asked no sample logprobs


def test_a_re_emitted_token_loses_its_row_and_leaves_the_prompt_logprobs_alone():
    p = engine_params(2, None)
    out = Output(sample_rows(3, 3))
    move_logprobs(out, p, hidden=True, primed=False)
    assert out.new_prompt_logprobs_tensors is None
    assert out.new_logprobs.sampled_token_ranks.tolist() == [2, 3]
    assert out.new_logprobs.logprob_token_ids[:, 0].tolist() == [10, 20]


def test_a_step_without_a_hidden_token_keeps_its_rows_unless_the_client_asked_none():
    rows = sample_rows(2, 3)
    out = Output(rows)
    move_logprobs(out, engine_params(2, 2), hidden=False, primed=False)
    assert out.new_logprobs is rows
    out = Output(sample_rows(2, 3))
    move_logprobs(out, engine_params(None, 2), hidden=False, primed=False)
    assert out.new_logprobs is None  # computed only for the prompt's sake
    out = Output(None)
    move_logprobs(out, engine_params(2, 2), hidden=True, primed=True)
    assert out.new_logprobs is None and out.new_prompt_logprobs_tensors is None
