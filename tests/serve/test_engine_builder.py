"""The server's engines come from the vLLM backend's one builder (vllm_engine.build_engine), the set fixed at start,
and Floor is requested on the speculative engine as its own method (on fakes: no engine starts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from asymspec_vl.backends.vllm import vllm_backend
from asymspec_vl.backends.vllm.engine import EngineSpec
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.methods import METHODS
from asymspec_vl.inputs.prompts import EncodedRequest, EncodedView, Prompts
from asymspec_vl.serve import vllm_runner
from asymspec_vl.serve.settings import ServeSettings


class FakeView:
    def __init__(self, spec):
        self.spec, self.max_model_len = spec, 64
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=64))
        )


@pytest.fixture
def built(monkeypatch):
    """Every build_engine call, and a server loaded on fakes; vLLM's AsyncLLM refuses to be built directly."""
    calls = []

    def build_engine(spec, dtype, tp, engine_kwargs, drafter_share=None, loop=None):
        calls.append((spec, dtype, tp, dict(engine_kwargs), drafter_share, loop))
        return FakeView(spec)

    def not_here(*a, **k):
        raise AssertionError("an engine was built outside vllm_engine.build_engine")

    from vllm.v1.engine.async_llm import AsyncLLM

    monkeypatch.setattr(AsyncLLM, "from_engine_args", not_here)
    monkeypatch.setattr(vllm_backend, "build_engine", build_engine)
    monkeypatch.setattr(vllm_runner, "configure_environment", lambda: None)
    monkeypatch.setattr(vllm_runner, "resolve", lambda role, name: name)
    monkeypatch.setattr(
        vllm_runner.ModelPair, "load", staticmethod(lambda d, v, **kw: FakePair())
    )
    loop = asyncio.new_event_loop()
    settings = ServeSettings(
        "drafter-x",
        "verifier-y",
        K=3,
        drafter_engine=True,
        drafter_memory=0.2,
        engine_kwargs={"max_model_len": 64},
    )
    runner = vllm_runner.VLLMRunner.load(settings, loop)
    yield runner, calls, loop
    loop.close()


class FakePair:
    vmap = SimpleNamespace(identity=True)  # one vocabulary (inputs/vocab_map.py)

    def banned_ids(self):
        return [7, 5]

    def stop_ids(self, cfg):
        return {2}


def test_the_server_builds_its_engines_only_through_build_engine(built):
    runner, calls, loop = built
    speculative, drafter = (
        EngineSpec("verifier-y", "drafter-x", 3),
        EngineSpec("drafter-x", images=True),
    )
    assert calls == [
        (speculative, "auto", 1, {"max_model_len": 64}, 0.2, loop),
        (drafter, "auto", 1, {"max_model_len": 64}, 0.2, loop),
    ]
    assert [v.spec for v in runner.views.values()] == [speculative, drafter]
    assert set(runner.methods) == set(METHODS)


def test_the_servers_engine_set_is_fixed(built):
    runner, calls, _ = built
    with pytest.raises(ConfigError, match="runs no engine for verifier-y"):
        runner.vl.backend.engine(EngineSpec("verifier-y"))
    assert len(calls) == 2


def test_floor_is_its_own_request_on_the_speculative_engine(built):
    runner, _, _ = built
    enc = EncodedRequest(
        Prompts("f", "c", "q"),
        EncodedView([1, 2, 3, 4]),
        EncodedView([1, 2, 3]),
        EncodedView([1]),
    )
    cfg = AsymSpecConfig(K=3, max_new_tokens=8)
    floor, sd = runner.plan(METHODS["floor"], cfg), runner.plan(METHODS["sd"], cfg)
    prompt, params = runner.engine_request(enc, floor)
    _, sd_params = runner.engine_request(enc, sd)
    assert (floor.mode, sd.mode, prompt) == (
        "floor",
        "sd",
        {"prompt_token_ids": [1, 2, 3]},
    )
    assert params.extra_args["asymspec"] == {
        **sd_params.extra_args["asymspec"],
        "mode": "floor",
    }
    assert (params.max_tokens, params.stop_token_ids) == (
        sd_params.max_tokens,
        sd_params.stop_token_ids,
    )
    assert floor.engine == runner._spec_of(METHODS["floor"]) == runner.speculative


def test_build_engine_gives_the_drafter_engine_its_gpu_share(monkeypatch):
    """The share rule the server had: the drafter-alone engine takes drafter_share, the speculative one 0.9 less it
    unless the options set its share."""
    from asymspec_vl.backends.vllm import engine as vllm_engine

    made = []
    monkeypatch.setattr("vllm.LLM", lambda model, **kw: made.append(kw) or kw)
    vllm_engine.build_engine(
        EngineSpec("d", images=True), "auto", 1, {"gpu_memory_utilization": 0.5}, 0.2
    )
    vllm_engine.build_engine(EngineSpec("v", "d", 4), "auto", 1, {}, 0.2)
    vllm_engine.build_engine(
        EngineSpec("v", "d", 4), "auto", 1, {"gpu_memory_utilization": 0.5}, 0.2
    )
    vllm_engine.build_engine(EngineSpec("v", "d", 4), "auto", 1, {})
    assert [kw.get("gpu_memory_utilization") for kw in made] == [
        0.2,
        pytest.approx(0.7),
        0.5,
        None,
    ]
