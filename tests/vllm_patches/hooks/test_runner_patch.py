"""vllm_patches.hooks.runner_patch hooks on a stand-in runner: what a tensor-parallel rank does when its sampler
fails."""

import types

import pytest
import torch

from vllm_patches import sampler
from vllm_patches.hooks import runner_patch
from vllm_patches.hooks.runner_state import RunnerState
from vllm_patches.requests import faults


class Exited(BaseException):
    """os._exit stand-in: the rank ended its process with this code."""


def runner_with(world_size: int):
    return types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        drafter=types.SimpleNamespace(world_size=world_size),
        asymspec=RunnerState(),
        requests={},
        sampler=None,
        input_batch=types.SimpleNamespace(
            update_async_output_token_ids=lambda: None,
            req_ids=[],
            num_logprobs={},
            max_num_logprobs=None,
        ),
    )


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_rank_local_sampler_failure_ends_the_rank_under_tensor_parallelism(
    monkeypatch, world_size
):
    """Finding 6: an error in the gate's path (first-sight row(), b's compute_logits) on one rank: with TP the
    rank ends its process (vLLM then stops the engine) instead of raising while the other ranks wait in the
    logits all-gather until vLLM's 300 s timeout; with one rank it raises as before."""

    def fails(*args):
        raise torch.OutOfMemoryError(
            "simulated out of memory in compute_logits on this rank"
        )

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(sampler, "sample", fails)
    monkeypatch.setattr(faults.os, "_exit", exit_)
    runner = runner_with(world_size)
    if world_size == 1:
        with pytest.raises(torch.OutOfMemoryError):
            runner_patch.sample(None, runner, torch.zeros(1, 4), None)
    else:
        with pytest.raises(Exited) as ended:
            runner_patch.sample(None, runner, torch.zeros(1, 4), None)
        assert ended.value.args == (faults.EXIT_CODE,)


def test_the_runners_asymspec_state_is_one_object_the_worker_rpcs_and_hooks_share():
    """Timing switched on by the worker RPC is the timer the hooks count steps and phases on (it lived in a loose
    runner attribute beside two more)."""
    from vllm_patches.hooks.worker_extension import AsymSpecWorkerExtension
    from vllm_patches.probes.phase_timing import timed

    runner = runner_with(1)
    worker = AsymSpecWorkerExtension()
    worker.model_runner = runner
    worker.asymspec_set_timing(True)
    assert runner.asymspec.timer is not None
    with timed(runner, "gate"):
        pass
    assert worker.asymspec_timing()["seconds"]["gate"] >= 0
    worker.asymspec_set_timing(False)
    assert runner.asymspec.timer is None and worker.asymspec_timing() is None


def test_the_profile_runs_our_sampler_after_vllms_at_max_num_seqs_rows(monkeypatch):
    """_dummy_sampler_run (vLLM's profile run and sampler warm-up): on an asymspec engine, after vLLM's own
    samplers, this engine's sampler on max_num_seqs dummy rows with K drafts each (fewer where the token budget
    cannot hold K + 1 tokens a row), the verifier's logits from its compute_logits, the drafter's vocabulary and
    dtype from its stored logits, vLLM's max_logprobs, each PROFILED rule; every other engine: vLLM's alone."""
    from vllm_patches import sampler_profile

    calls = []
    monkeypatch.setattr(
        sampler_profile,
        "dummy_step",
        lambda method, samples, logits, n, vocab_d, dtype_d, vllm_sampler, k, vmap, bonus: (
            calls.append(
                (method, samples, bonus, tuple(logits.shape), n, vocab_d, dtype_d, k)
            )
        ),
    )
    hidden = torch.zeros(3, 8, dtype=torch.bfloat16)
    for method, budget, drafts in (
        ("asymspec", 100, 4),
        ("asymspec", 16, 1),
        ("eagle", 100, 0),
    ):
        calls.clear()
        runner = types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(
                speculative_config=types.SimpleNamespace(method=method)
            ),
            max_num_reqs=8,
            max_num_tokens=budget,
            model=types.SimpleNamespace(
                compute_logits=lambda h: torch.zeros(h.shape[0], 30, dtype=h.dtype)
            ),
            model_config=types.SimpleNamespace(max_logprobs=20),
            drafter=types.SimpleNamespace(
                K=4,
                vmap=None,
                full=types.SimpleNamespace(
                    draft_logits=types.SimpleNamespace(
                        logits=torch.zeros(8, 5, 32, dtype=torch.float16)
                    )
                ),
            ),
            sampler="vLLM's Sampler",
        )
        out = runner_patch.dummy_sampler_run(
            lambda r, h: calls.append(("vLLM's", h.shape)) or "output", runner, hidden
        )
        assert out == "output"
        ours = [
            (m, s, b, (8 * (drafts + 1), 30), drafts, 32, torch.float16, 20)
            for m, s, b in sampler_profile.PROFILED
        ]
        assert calls == [("vLLM's", hidden.shape)] + (
            ours if method == "asymspec" else []
        )
