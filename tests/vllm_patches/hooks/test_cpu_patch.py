"""vllm_patches.hooks.cpu_patch on a stand-in runner: an asymspec engine's CPU runner is built as vLLM builds it
less the speculative-decoding refusal, loads the drafter, and first traces its models at the whole token budget
(the GPU's profile run); every other engine keeps vLLM's stock steps (its refusal included); the patch wraps once."""

import contextlib
import types

import pytest
import torch
from vllm.v1.worker import cpu_model_runner

from vllm_patches.hooks import cpu_patch
from vllm_patches.hooks._patching import is_patched, unwrap


def config(method: str | None):
    spec = None if method is None else types.SimpleNamespace(method=method)
    return types.SimpleNamespace(speculative_config=spec)


def stock(calls: list, name: str):
    return lambda *args: calls.append((name, *args))


def test_other_engines_keep_the_stock_constructor(monkeypatch):
    calls = []
    monkeypatch.setattr(
        cpu_model_runner, "GPUModelRunner", pytest.fail
    )  # never reached
    for method in (None, "eagle"):
        cfg = config(method)
        cpu_patch.init(stock(calls, "init"), "runner", cfg, torch.device("cpu"))
        assert calls[-1] == ("init", "runner", cfg, torch.device("cpu"))


def test_an_asymspec_runner_is_built_as_vllm_builds_it_without_the_refusal(
    monkeypatch,
):
    events = []

    @contextlib.contextmanager
    def cuda_wrapper():
        events.append("wrap")
        yield
        events.append("unwrap")

    class GPUModelRunner:
        def __init__(self, vllm_config, device):  # called unbound, on the CPU runner
            events.append(("gpu init", self, vllm_config, device))

    monkeypatch.setattr(cpu_model_runner, "_torch_cuda_wrapper", cuda_wrapper)
    monkeypatch.setattr(cpu_model_runner, "GPUModelRunner", GPUModelRunner)
    runner = types.SimpleNamespace(
        use_cuda_graph=True,
        cascade_attn_enabled=True,
        _postprocess_tensors=lambda: events.append("tensors"),
        _postprocess_triton=lambda: events.append("triton"),
    )
    cfg = config("asymspec")
    cpu_patch.init(pytest.fail, runner, cfg, torch.device("cpu"))
    assert events == [
        "wrap",
        ("gpu init", runner, cfg, torch.device("cpu")),
        "unwrap",
        "tensors",
        "triton",
    ]
    assert runner.use_cuda_graph is False and runner.cascade_attn_enabled is False
    with pytest.raises(AssertionError):  # vLLM's CPU runner only runs on the CPU
        cpu_patch.init(pytest.fail, runner, cfg, torch.device("meta"))


def test_the_drafter_loads_with_the_verifier_on_asymspec_engines_only():
    for method, drafter_loads in (("asymspec", True), ("eagle", False), (None, False)):
        calls = []
        runner = types.SimpleNamespace(
            vllm_config=config(method),
            model="verifier-model",
            drafter=types.SimpleNamespace(
                load_model=lambda model, calls=calls: calls.append(("drafter", model))
            ),
        )
        cpu_patch.load_model(stock(calls, "load"), runner, True)
        expected = [("load", runner, True)]
        if drafter_loads:
            expected.append(("drafter", "verifier-model"))
        assert calls == expected


def test_an_asymspec_engine_is_first_traced_at_the_whole_token_budget_then_runs_its_sampler(
    monkeypatch,
):
    """The GPU profile run's order: the dummy forward at the whole token budget, then (its _dummy_sampler_run) this
    engine's sampler on the forward's last hidden states (runner_patch.profile_sampler), then the CPU warm-up."""
    events = []

    @contextlib.contextmanager
    def settings(vllm_config):
        events.append(("settings", vllm_config))
        yield
        events.append("settings done")

    monkeypatch.setattr(cpu_model_runner, "_set_global_compilation_settings", settings)
    monkeypatch.setattr(
        cpu_patch,
        "profile_sampler",
        lambda runner, hidden: events.append(("our sampler", runner, hidden)),
    )
    for method in ("asymspec", "eagle"):
        events.clear()
        runner = types.SimpleNamespace(
            vllm_config=config(method),
            max_num_tokens=2048,
            _dummy_run=lambda n, **kw: (
                events.append(("dummy", n, kw)) or ("hidden", "last hidden")
            ),
        )
        cpu_patch.warming_up_model(lambda r: events.append(("warm-up", r)), runner)
        first = (
            [
                ("settings", runner.vllm_config),
                ("dummy", 2048, {"is_profile": True}),
                "settings done",
                ("our sampler", runner, "last hidden"),
            ]
            if method == "asymspec"
            else []
        )
        assert events == first + [("warm-up", runner)]


def test_the_patch_wraps_the_cpu_runner_once():
    cls = cpu_model_runner.CPUModelRunner
    names = ("__init__", "load_model", "warming_up_model")
    own = {n: cls.__dict__.get(n) for n in names}
    try:
        for n in names:
            unwrap(cls, n)
        stock_ = {n: cls.__dict__[n] for n in names}  # CPUModelRunner defines all three
        cpu_patch.patch_cpu_runner()
        patched = {n: cls.__dict__[n] for n in names}
        cpu_patch.patch_cpu_runner()
        for n in names:
            assert is_patched(patched[n]) and cls.__dict__[n] is patched[n]
            assert patched[n].__asymspec_original__ is stock_[n]
    finally:
        for n in names:
            setattr(cls, n, own[n])
