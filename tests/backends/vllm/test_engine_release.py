"""A closed in-process engine leaves nothing of itself in process-wide tables: dynamo's bytecode hooks (every
compiled vLLM model registers one and nothing takes it out: the stress run's `--gpu-shaped only` grew about 1 GB
per compiled case) and torch's record of compiled artifacts."""

import gc
import sys
import types
import weakref

import pytest
import torch
from helpers import random_request
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
