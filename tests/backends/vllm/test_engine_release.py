"""A closed in-process engine leaves nothing of itself in process-wide tables: dynamo's bytecode hooks (every
compiled vLLM model registers one and nothing takes it out: the stress run's `--gpu-shaped only` grew about 1 GB
per compiled case) and torch's record of compiled artifacts; nor in the collector's frozen generation (vLLM
freezes the heap as an engine starts: an engine closed while another lived stayed frozen)."""

import gc
import logging
import sys
import types
import weakref

import pytest
import torch
from helpers import random_request, runner_of
from torch._dynamo import convert_frame

from asymspec_vl.backends.vllm import engine


class CompiledModel:
    """Stands in for a vLLM-compiled model: it registers its bound hook as vllm/compilation/wrapper.py does."""

    def __init__(self):
        self.seen = []
        self.handle = convert_frame.register_bytecode_hook(self.bytecode_hook)

    def bytecode_hook(self, old_code, new_code):
        self.seen.append((old_code, new_code))


def test_a_closed_models_bytecode_hook_lets_it_go_and_a_live_ones_still_runs():
    live, closed = CompiledModel(), CompiledModel()
    closed_ref, closed_key = weakref.ref(closed), closed.handle.id
    try:
        engine.weaken_bytecode_hooks()
        engine.weaken_bytecode_hooks()  # idempotent: a weak hook stays as it is
        del closed
        gc.collect()
        assert closed_ref() is None  # nothing but dynamo's table held it
        assert closed_key not in convert_frame._bytecode_hooks  # its entry went with it
        hook = convert_frame._bytecode_hooks[live.handle.id]
        hook("old", "new")  # dynamo calls the table's hooks with (old code, new code)
        assert live.seen == [("old", "new")]
    finally:
        live.handle.remove()


def test_releasing_the_process_memory_forgets_torchs_compiled_artifacts(monkeypatch):
    from torch._dynamo.precompile_context import PrecompileContext
    from vllm.distributed import parallel_state

    monkeypatch.setattr(parallel_state, "cleanup_dist_env_and_memory", lambda: None)
    monkeypatch.setitem(PrecompileContext._backend_artifacts_by_key, "k", object())
    engine._release_process_memory()
    assert PrecompileContext._backend_artifacts_by_key == {}


def test_releasing_the_process_memory_takes_out_the_compiled_graphs_of_vllms_models(
    monkeypatch,
):
    """dynamo installs each compiled graph as a global of the compiled function's module; with no engine left in
    any backend those of vLLM's model modules go, everything else stays."""
    from vllm.distributed import parallel_state

    monkeypatch.setattr(parallel_state, "cleanup_dist_env_and_memory", lambda: None)
    graph = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    models = types.ModuleType("vllm.model_executor.models.stand_in")
    other = types.ModuleType("stand_in_user_module")
    for module in (models, other):
        module.__compiled_fn_1_abc = graph
        module.keep = 1
        monkeypatch.setitem(sys.modules, module.__name__, module)
    graph_ref = weakref.ref(graph)
    del graph, module
    busy = engine.EngineCache(lambda spec: spec, 1)
    busy.live[engine.EngineSpec("m")] = "another backend's live engine"
    engine._release_process_memory()
    assert models.__compiled_fn_1_abc is graph_ref()  # its engine may still call it
    busy.live.clear()
    engine._release_process_memory()
    assert not hasattr(models, "__compiled_fn_1_abc") and models.keep == 1
    assert other.__compiled_fn_1_abc is graph_ref()  # not vLLM's: left alone
    del other.__compiled_fn_1_abc
    gc.collect()
    assert graph_ref() is None


def test_the_distributed_state_is_cleaned_up_only_when_no_backend_has_a_live_engine(
    monkeypatch,
):
    """vLLM's clean-up destroys the process-wide model-parallel groups and unfreezes the heap: a cache that empties
    while another backend's engine lives must leave both to that engine."""
    from vllm.distributed import parallel_state

    cleanups = []
    monkeypatch.setattr(
        parallel_state, "cleanup_dist_env_and_memory", lambda: cleanups.append(1)
    )
    busy = engine.EngineCache(lambda spec: spec, 1)
    busy.live[engine.EngineSpec("m")] = "another backend's live engine"
    engine._release_process_memory()
    assert cleanups == []
    busy.live.clear()
    engine._release_process_memory()
    assert cleanups == [1]


class StandInEngine:
    """Stands in for an in-process engine: cyclic garbage once closed (a vLLM model and its VllmConfig, attention
    layers and KV cache refer to each other), so only the cyclic collector frees it."""

    def __init__(self, spec):
        self.itself = self


def test_an_engine_closed_while_another_lives_is_collected_though_the_heap_was_frozen(
    monkeypatch,
):
    """vLLM's engine core freezes the heap at start-up (freeze_gc_heap): the closed engine must go all the same,
    and the live one's start-up heap stay frozen; a heap nobody froze stays unfrozen."""
    monkeypatch.setattr(engine, "shutdown_engine", lambda llm: None)
    # an earlier test's in-process engine may have frozen the heap: frozen again at the end
    frozen_before = gc.get_freeze_count() > 0
    cache = engine.EngineCache(StandInEngine, 3)
    gone, live = engine.EngineSpec("gone"), engine.EngineSpec("live")
    try:
        gc.unfreeze()
        gone_ref = weakref.ref(cache.get(gone))
        cache.get(live)
        cache.close(gone)  # nobody froze the heap
        assert gone_ref() is None and gc.get_freeze_count() == 0
        gone_ref = weakref.ref(cache.get(gone))
        gc.freeze()  # as vLLM's EngineCore.__init__ does
        cache.close(gone)
        assert gone_ref() is None
        assert gc.get_freeze_count() > 0
        assert id(cache.live[live]) not in {id(o) for o in gc.get_objects()}  # frozen
    finally:
        cache.live.clear()
        gc.unfreeze()
        if frozen_before:
            gc.freeze()


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_closed_compiled_engine_releases_its_model_and_config(tiny_models):
    """A compiled engine (enforce_eager=False: vLLM's torch.compile of the verifier and the drafter) closed in
    this process: no vLLM model of it is left (each held its VllmConfig, attention layers and KV cache). Its
    VllmConfig is not counted: pytest's log capture keeps the records vLLM logged it in until the test ends."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    def left() -> list[str]:
        gc.unfreeze()  # vLLM freezes the heap after start-up: frozen objects are not listed
        gc.collect()
        return [
            type(o).__name__
            for o in gc.get_objects()
            if isinstance(o, torch.nn.Module)
            and type(o).__module__.startswith("vllm.model_executor.models")
        ]

    before, hooks = left(), len(convert_frame._bytecode_hooks)
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        enforce_eager=False,
        max_num_batched_tokens=256,
    )
    try:
        out = vl.generate_batch(
            [random_request(0)], "asymspec", AsymSpecConfig(K=2, max_new_tokens=2)
        )
        assert out[0].token_ids and len(left()) > len(before)
        assert (
            len(convert_frame._bytecode_hooks) > hooks
        )  # it compiled: its models' hooks
    finally:
        vl.backend.close()
    del vl
    assert left() == before
    assert not [
        key
        for name, module in list(sys.modules.items())
        if name.startswith("vllm.model_executor.models.")
        for key in vars(module)
        if key.startswith("__compiled_fn_")
    ]  # dynamo's compiled graphs of its models went too


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_an_engine_closed_while_another_lives_frees_its_model_and_kv_cache(
    tiny_models, monkeypatch
):
    """Two in-process engines (the CPU build's cache keeps two), the first closed while the second lives: vLLM
    froze the heap as each started, and the closed one's model and KV cache (1 GiB here) go at its close, not at
    the last engine's. The engine core's start-up record is not logged: it carries the VllmConfig (-> attention
    layers -> KV cache), and pytest keeps every record until the test ends."""
    monkeypatch.setattr(logging.getLogger("vllm.v1.engine.core"), "disabled", True)
    engine.configure_environment()
    cache = engine.EngineCache(lambda spec: engine.build_engine(spec, "auto", 1, {}), 2)
    gone, live = (
        engine.EngineSpec(str(tiny_models[m])) for m in ("verifier", "text_drafter")
    )
    try:
        runner = runner_of(cache.get(gone))
        model_ref, kv_ref = weakref.ref(runner.model), weakref.ref(runner.kv_caches[0])
        del runner
        cache.get(live)
        assert gc.get_freeze_count() > 0  # vLLM froze the heap at start-up
        cache.close(gone)
        assert model_ref() is None and kv_ref() is None
    finally:
        cache.close()
