"""vllm_patches/requests/plain_dead_ends.py and hooks/plain_sampler_patch.py without an engine: a plain engine's
structured row whose logits vLLM's processors leave with nothing finite is a dead end (rows without a grammar this
step are never read); its error is grammar_dead_end.py's, and it rides on the step's output, now for a synchronous
step and at get_output for an async one (a GPU's default for plain engines; the CPU build runs none)."""

from types import SimpleNamespace

import torch
from vllm.sampling_params import StructuredOutputsParams

from vllm_patches.hooks import plain_sampler_patch
from vllm_patches.hooks.runner_patch import ERRORS_ATTR
from vllm_patches.requests.plain_dead_ends import WATCH_ATTR, Watch, watch

NEG = float("-inf")
CHOICE = StructuredOutputsParams(choice=["yes", "no"])


def _runner(req_ids, outputs):
    """A runner as the hooks read it: its batch order, each request's outputs and constraint (None: no grammar)."""
    return SimpleNamespace(
        speculative_config=None,
        sampler=SimpleNamespace(),
        input_batch=SimpleNamespace(
            req_id_to_index={r: i for i, r in enumerate(req_ids)}
        ),
        requests={
            r: SimpleNamespace(
                output_token_ids=out,
                sampling_params=SimpleNamespace(structured_outputs=CHOICE),
            )
            for r, out in zip(req_ids, outputs)
        },
    )


def _hold(stop_id):
    """A processor as vLLM's min_tokens runs it: the stop token -inf in every row, in place."""

    def process(logits):
        logits[:, stop_id] = NEG
        return logits

    return process


def test_a_structured_row_left_with_nothing_is_a_dead_end_and_others_are_never_read():
    runner = _runner(["a", "b", "c"], [[5, 6], [], [7]])
    grammar = SimpleNamespace(structured_output_request_ids=["c", "a", "gone"])
    found = watch(runner, grammar)
    assert getattr(runner.sampler, WATCH_ATTR) is found
    assert (found.rows, found.req_ids, found.positions) == ([2, 0], ["c", "a"], [1, 2])
    logits = torch.zeros(3, 4)  # [B, V]
    logits[0] = torch.tensor(
        [NEG, NEG, NEG, 0.0]
    )  # a: the grammar allows only the stop token 3
    logits[1] = NEG  # b: no grammar this step, never reported
    logits[2, 1:] = NEG  # c: token 0 only, which the hold leaves
    out = found.look(logits, _hold(3))
    # per batch row: dead end, tokens the grammar allows
    assert out is logits and found.read.tolist() == [[1, 1, 0], [1, 0, 1]]
    errors = found.errors()
    assert list(errors) == ["a"]
    message = errors["a"]
    assert message.startswith("GrammarDeadEndError: the structured output (choice ")
    assert (
        "at output position 2 " in message
        and "allows 1 of the engine's tokens" in message
    )
    assert "The answer so far (2 tokens) is kept." in message


def test_no_grammar_or_vllms_own_speculation_sets_no_watch():
    runner = _runner(["a"], [[]])
    assert watch(runner, None) is None
    assert getattr(runner.sampler, WATCH_ATTR) is None
    assert (
        watch(runner, SimpleNamespace(structured_output_request_ids=["gone"])) is None
    )
    runner.speculative_config = (
        object()
    )  # vLLM's own EAGLE / ngram: its logits rows are not the batch's
    assert watch(runner, SimpleNamespace(structured_output_request_ids=["a"])) is None
    assert getattr(runner.sampler, WATCH_ATTR) is None


def test_the_processors_hook_passes_through_without_a_watch():
    calls = []

    def original(sampler, logits, meta, bonus):
        calls.append((meta, bonus))
        return logits * 2

    sampler = SimpleNamespace()
    logits = torch.ones(1, 3)
    got = plain_sampler_patch.apply_logits_processors(
        original, sampler, logits, "m", False
    )
    assert torch.equal(got, torch.full((1, 3), 2.0)) and calls == [("m", False)]
    found = Watch([0], ["a"], [0], [CHOICE])
    setattr(sampler, WATCH_ATTR, found)
    plain_sampler_patch.apply_logits_processors(
        lambda s, lg, m, b: lg.fill_(NEG), sampler, logits, "m", False
    )
    assert found.errors().keys() == {"a"}


def _dead_watch():
    found = Watch([0], ["a"], [3], [CHOICE])
    found.look(torch.full((1, 4), NEG), lambda lg: lg)
    return found


def test_the_errors_ride_on_a_synchronous_output_as_a_copy():
    shared = SimpleNamespace(req_ids=["a"])  # vLLM may hand out one shared empty output
    got = plain_sampler_patch.with_errors(shared, _dead_watch(), ERRORS_ATTR)
    assert got is not shared and not hasattr(shared, ERRORS_ATTR)
    assert "GrammarDeadEndError" in getattr(got, ERRORS_ATTR)["a"]
    alive = Watch([0], ["a"], [3], [CHOICE])
    alive.look(torch.zeros(1, 4), lambda lg: lg)
    assert plain_sampler_patch.with_errors(shared, alive, ERRORS_ATTR) is shared
    assert plain_sampler_patch.with_errors(shared, None, ERRORS_ATTR) is shared


def test_the_errors_ride_on_an_async_output_when_it_is_read():
    async_output = (
        SimpleNamespace()
    )  # AsyncGPUModelRunnerOutput: no req_ids until get_output
    assert (
        plain_sampler_patch.with_errors(async_output, _dead_watch(), ERRORS_ATTR)
        is async_output
    )
    inner = SimpleNamespace(req_ids=["a"])
    got = plain_sampler_patch.get_output(lambda o: inner, async_output)
    assert "GrammarDeadEndError" in getattr(got, ERRORS_ATTR)["a"]
    plain = SimpleNamespace()
    assert plain_sampler_patch.get_output(lambda o: inner, plain) is inner
