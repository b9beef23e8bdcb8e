"""A plain engine row's logprobs over a support (requests/logprob_support.py) on plain values: the rows that ask
for logprobs and name ids outside their support get those ids -inf before vLLM's sampler, the others keep their
logits untouched, a step where no row asks does nothing, and a request that left the batch is forgotten."""

from types import SimpleNamespace

import torch

from vllm_patches.requests.logprob_support import SUPPORT_KEY, restrict


def _runner(rows: dict, asking: set, max_num_logprobs=2):
    """rows: req_id -> the ids outside its support (None: no key); asking: the req_ids that ask for logprobs."""
    requests = {
        r: SimpleNamespace(
            sampling_params=SimpleNamespace(
                extra_args=None if out is None else {SUPPORT_KEY: out}
            )
        )
        for r, out in rows.items()
    }
    batch = SimpleNamespace(
        req_ids=list(rows),
        num_logprobs={r: 2 for r in asking},
        max_num_logprobs=max_num_logprobs,
    )
    return SimpleNamespace(input_batch=batch, requests=requests)


def test_only_rows_asking_with_a_support_are_masked():
    runner = _runner({"a": [1, 3], "b": None, "c": [0]}, asking={"a", "b"})
    logits = torch.arange(12, dtype=torch.float32).view(3, 4)
    before = logits.clone()
    restrict(runner, logits)
    assert logits[0].tolist() == [0.0, float("-inf"), 2.0, float("-inf")]
    assert torch.equal(
        logits[1:], before[1:]
    )  # b names no support; c asks for no logprobs
    # vLLM's raw logprobs of row a: normalised over its support {0, 2}
    lp = logits[0].log_softmax(-1)
    assert torch.allclose(lp[[0, 2]].exp().sum(), torch.tensor(1.0))


def test_a_step_where_no_row_asks_touches_nothing_and_the_cache_follows_the_batch():
    runner = _runner({"a": [1]}, asking={"a"}, max_num_logprobs=None)
    logits = torch.zeros(1, 3)
    restrict(runner, logits)
    assert torch.equal(logits, torch.zeros(1, 3))
    runner.input_batch.max_num_logprobs = 2
    restrict(runner, logits)
    assert set(runner.asymspec_logprob_support) == {"a"}
    runner.input_batch.req_ids, runner.input_batch.num_logprobs = [], {}
    restrict(runner, torch.zeros(0, 3))
    assert runner.asymspec_logprob_support == {}
