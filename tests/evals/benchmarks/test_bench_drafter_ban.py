"""evals/benchmarks/bench_drafter_ban.py without an engine: the ban is the backend's (the shared set less the pair's
banned tokens allowed, every other drafter id banned), each route's params are the old and the new backend's
(logit_bias: a -inf dict per request; allowed_token_ids: the pair's one list by reference), the host clock times
vLLM's InputBatch calls and puts them back, and bad --steps are refused. Never timed."""

import pytest
import torch
from asymspec_vl.evals.benchmarks import bench_drafter_ban as bdb

from asymspec_vl.core.vocab_align import VocabMap

# drafter 6 ids, verifier 4: drafter ids 0-3 are shared (verifier id 3 - d), 4 and 5 are not
VMAP = VocabMap(torch.tensor([3, 2, 1, 0]), torch.arange(4), 6, 4)


def test_the_ban_is_the_backends_and_splits_the_drafters_ids():
    ban = bdb.ban_of(VMAP, [2])  # verifier id 2 is drafter id 1
    assert ban == bdb.Ban([0, 2, 3], [1, 4, 5])
    assert bdb.ban_of(VMAP, []) == bdb.Ban([0, 1, 2, 3], [4, 5])


def test_each_route_builds_the_params_its_backend_built():
    ban = bdb.ban_of(VMAP, [])
    old = bdb.route_params("logit_bias", ban, seed=3, max_tokens=5)
    assert old.logit_bias == {4: float("-inf"), 5: float("-inf")}
    assert not old.allowed_token_ids and not old.skip_clone
    new = bdb.route_params("allowed_token_ids", ban, seed=3, max_tokens=5)
    assert new.allowed_token_ids is ban.allowed and new.skip_clone
    assert not new.logit_bias
    free = bdb.route_params("none", ban, seed=3, max_tokens=5)
    assert not free.logit_bias and not free.allowed_token_ids
    assert {(p.seed, p.max_tokens, p.temperature) for p in (old, new, free)} == {
        (3, 5, 1.0)
    }


def test_the_host_clock_times_vllms_input_batch_and_puts_it_back():
    from vllm.v1.worker.gpu_input_batch import InputBatch  # lazy: loads vLLM

    stock = (InputBatch.add_request, InputBatch.refresh_metadata)
    clock = bdb.HostClock()
    try:
        assert (InputBatch.add_request, InputBatch.refresh_metadata) != stock
        seen = []

        class Batch:
            num_reqs = 7

        clock._timed("refresh_metadata", seen.append)(Batch())
        assert len(seen) == 1 and clock.log[0][:2] == ("refresh_metadata", 7)
        assert clock.log[0][2] >= 0
    finally:
        clock.close()
    assert (InputBatch.add_request, InputBatch.refresh_metadata) == stock


@pytest.mark.parametrize("steps", ["3", "5"])
def test_too_few_steps_are_refused(steps, capsys):
    with pytest.raises(SystemExit):
        bdb.main(["--steps", steps])
    assert "--steps must be at least 6" in capsys.readouterr().err
