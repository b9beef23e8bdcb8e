"""evals/stress/engine_run.py without an engine: the vllm.LLM arguments a workload's engine gets (the forced
preemption's KV blocks, the budget never below max_num_seqs), the small x_full pool's size, the environment switch
put back, and the arrival loop on a stand-in engine (requests added at their steps, idle stretches skipped, the
rest aborted when a step fails)."""

import gc
import os
import types

import pytest
import torch
from asymspec_vl.evals.stress import engine_run
from asymspec_vl.evals.stress.hf_side import Reference
from asymspec_vl.evals.stress.workload import (
    EngineCase,
    RowSpec,
    Workload,
    make_request,
)

from asymspec_vl.inputs.prompts import encode_request


def enc(comp: int, full: int, drafter_comp: int | None = None):
    """An EncodedRequest stand-in: only the lengths of x_comp, x_full and a cross-family pair's drafter x_comp
    are read."""
    return types.SimpleNamespace(
        comp=types.SimpleNamespace(ids=[7] * comp),
        full=types.SimpleNamespace(ids=[7] * full),
        drafter_comp=None
        if drafter_comp is None
        else types.SimpleNamespace(ids=[7] * drafter_comp),
    )


def workload(engine: EngineCase, rows: list[tuple[str, int]]) -> Workload:
    return Workload(
        0,
        engine,
        tuple(
            RowSpec(mode=mode, K=1, max_new=new, request_seed=i)
            for i, (mode, new) in enumerate(rows)
        ),
    )


def test_a_preempting_engine_gets_its_largest_request_and_a_quarter_of_the_next():
    engine = EngineCase(block_size=16, K=3, max_num_seqs=2, preempt=True)
    w = workload(engine, [("asymspec", 10), ("sd", 20), ("plain", 5)])
    encs = [enc(40, 90), enc(100, 90), enc(40, 90)]
    # blocks each needs: ceil((comp + max_new + K + 3) / 16) = 4, 8, 4; max_num_seqs 2: the largest + 1 + a
    # quarter of the next one's 4 (of the next max_num_seqs - 1 only: not of both 4s)
    assert engine_run.engine_kwargs(w, encs) == {
        "block_size": 16,
        "max_num_seqs": 2,
        "enable_prefix_caching": True,
        "num_gpu_blocks_override": 8 + 1 + 1,
    }


def test_the_token_budget_never_falls_below_max_num_seqs_and_none_keeps_vllms():
    tight = EngineCase(max_num_seqs=8, max_num_batched_tokens=4, prefix_caching=False)
    kwargs = engine_run.engine_kwargs(workload(tight, [("sd", 4)]), [enc(5, 5)])
    assert kwargs["max_num_batched_tokens"] == 8
    assert kwargs["enable_prefix_caching"] is False
    assert "num_gpu_blocks_override" not in kwargs
    default = engine_run.engine_kwargs(workload(EngineCase(), [("sd", 4)]), [enc(5, 5)])
    assert "max_num_batched_tokens" not in default


def test_a_small_pool_holds_about_one_and_a_half_of_the_largest_asymspec_request():
    engine = EngineCase(block_size=16, K=2, small_pool=True)
    w = workload(engine, [("asymspec", 10), ("sd", 500), ("asymspec", 3)])
    encs = [enc(5, 50), enc(5, 900), enc(5, 60)]
    # asymspec needs 50 + 10 + 5 = 65 and 60 + 3 + 5 = 68 tokens: 5 blocks; 5 + 2 + 2 blocks of 16
    assert engine_run.full_view_tokens(w, encs) == (5 + 2 + 2) * 16
    assert (
        engine_run.full_view_tokens(workload(engine, [("sd", 9)]), [enc(5, 50)]) is None
    )
    roomy = EngineCase(block_size=16, K=2, small_pool=False)
    assert (
        engine_run.full_view_tokens(workload(roomy, [("asymspec", 9)]), encs[:1])
        is None
    )


def test_across_a_map_the_small_pool_also_holds_the_drafters_own_x_comp_view():
    """Found by the first cross-family stress run (seed 7, small pool): a cross-family request's x_comp in the
    drafter's ids lives in the x_full pool too (scheduler_patch.full_view_blocks), so a pool sized on x_full alone
    refused requests with PoolExhaustedError."""
    engine = EngineCase(block_size=16, K=2, small_pool=True, pair="cross")
    w = workload(engine, [("asymspec", 10), ("sd", 20), ("floor", 500)])
    encs = [enc(5, 50, 30), enc(5, 900, 100), enc(5, 900, 900)]
    # asymspec: x_full 50 + 15 -> 5 blocks, its x_comp 30 + 15 -> 3 blocks: 8; sd: its x_comp 100 + 25 -> 8 blocks
    # (no x_full view); floor reads neither
    assert engine_run.full_view_tokens(w, encs) == (8 + 4 + 2) * 16
    assert (
        engine_run.full_view_tokens(workload(engine, [("floor", 9)]), [enc(5, 50, 30)])
        is None
    )


def test_the_environment_switch_is_put_back(monkeypatch):
    name = "ASYMSPEC_STRESS_TEST_SWITCH"
    monkeypatch.delenv(name, raising=False)
    with engine_run._env(name, "96"):
        assert os.environ[name] == "96"
    assert name not in os.environ
    monkeypatch.setenv(name, "old")
    with pytest.raises(KeyError), engine_run._env(name, "new"):
        raise KeyError("the engine failed")
    assert os.environ[name] == "old"
    with engine_run._env(name, None):  # None: leave the variable as it is
        assert os.environ[name] == "old"


class StandInEngine:
    """vLLM's LLMEngine as run_arrivals drives it: a request finishes `length` steps after it was added."""

    def __init__(self, fail_at_step: int | None = None):
        self.step_no, self.added, self.aborted = 0, {}, []
        self.fail_at_step = fail_at_step
        self.running: dict[str, int] = {}

    def add_request(self, rid, prompt, params):
        self.added[rid] = self.step_no
        self.running[rid] = params

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        if self.step_no == self.fail_at_step:
            raise RuntimeError("engine core died")
        self.step_no += 1
        out = []
        for rid, left in list(self.running.items()):
            self.running[rid] = left - 1
            done = left == 1
            out.append(types.SimpleNamespace(request_id=rid, finished=done))
            if done:
                del self.running[rid]
        return out

    def abort_request(self, rids):
        self.aborted += list(rids)


def test_requests_arrive_at_their_steps_and_idle_stretches_are_skipped():
    engine = StandInEngine()
    llm = types.SimpleNamespace(llm_engine=engine)
    items = [
        (0, "a", {}, 2),
        (1, "b", {}, 3),
        (20, "c", {}, 1),
    ]  # params: steps to finish
    done = engine_run.run_arrivals(llm, items)
    assert sorted(done) == ["a", "b", "c"] and all(o.finished for o in done.values())
    # "b" arrives at step 1 while "a" runs; nothing runs after step 4, so "c" comes at once (not 16 idle steps)
    assert engine.added == {"a": 0, "b": 1, "c": 4}
    assert engine.step_no == 5 and engine.aborted == []


def test_a_failing_step_aborts_every_unfinished_request_and_raises():
    engine = StandInEngine(fail_at_step=2)
    llm = types.SimpleNamespace(llm_engine=engine)
    items = [(0, "a", {}, 1), (0, "b", {}, 5), (9, "c", {}, 1)]
    with pytest.raises(RuntimeError, match="engine core died"):
        engine_run.run_arrivals(llm, items)
    assert engine.aborted == ["b", "c"]  # "a" finished at step 1


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_case_leaves_no_engine_for_the_interpreters_next_collection(tiny_models):
    """run_on_engine closes its engine with nothing of its own still holding it: the close's collection frees the
    engine's model (and KV cache) at once, not the interpreter's next full collection (the stress run sat 1 GiB
    higher after some cases)."""

    def vllm_models() -> int:
        gc.unfreeze()  # vLLM freezes the heap after start-up (not a collection)
        return sum(
            isinstance(o, torch.nn.Module)
            and type(o).__module__.startswith("vllm.model_executor.models")
            for o in gc.get_objects()
        )

    paths = {**tiny_models, "root": tiny_models["verifier"].parent}
    reference = Reference(paths)
    w = workload(
        EngineCase(block_size=16, K=2, max_num_seqs=2), [("plain", 3), ("sd", 3)]
    )
    pair = reference.pair
    encs = [
        encode_request(make_request(r), pair.processor, pair.tokenizer) for r in w.rows
    ]
    gc.collect()
    before = vllm_models()
    gc.disable()  # only the close's own collection runs
    try:
        run = engine_run.run_on_engine(w, pair, paths, encs)
        left = vllm_models()
    finally:
        gc.enable()
    assert run.error is None and all(row is not None for row in run.rows)
    assert left == before
