"""The server's vLLM runner: AsyncLLM engines, every request decoded with the others in flight (continuous batching).

  speculative engine  the verifier as target, the VL drafter as draft model (method "asymspec"): serves asymspec,
                      sd, scd and floor per request, at every K up to the server's -K
  drafter engine      (--drafter-engine) the VL drafter as target: method "drafter"; on a GPU it takes a share of
                      its own (--drafter-memory, a gpu_memory_utilization), started after the speculative one
A request becomes exactly what the vLLM backend submits (VLLMBackend.served_request: prompt, stop and banned
tokens, budget, extra_args); the backend reaches these engines through EngineView. Floor reads what SD reads
(x_comp, the same budget): on the speculative engine it is SD's request in mode "floor" (no drafts).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from types import SimpleNamespace
from typing import AsyncIterator

from ..api import AsymSpecVL
from ..backends.engine_life import shut_down
from ..backends.vllm import VLLMBackend
from ..backends.vllm_engine import CPU_DEFAULTS, EngineCache, EngineSpec, configure_environment, engine_dtype, on_cpu
from ..config import AsymSpecConfig
from ..defaults import resolve
from ..errors import ConfigError
from ..methods import METHODS, SPECULATIVE_ENGINE_MODES, Method
from ..prompts import EncodedRequest
from ..vocab import ModelPair
from .runner import Progress
from .settings import ServeSettings

_request_ids = itertools.count()


class EngineView:
    """An AsyncLLM as VLLMBackend sees an `LLM`: its config, and its named worker RPCs as blocking calls (made from
    worker threads while the event loop runs the engine)."""

    def __init__(self, engine, loop: asyncio.AbstractEventLoop):
        self.engine, self.loop = engine, loop
        self.llm_engine = SimpleNamespace(vllm_config=engine.vllm_config)

    def collective_rpc(self, method: str, args: tuple = ()) -> list:
        return asyncio.run_coroutine_threadsafe(self.engine.collective_rpc(method, args=args), self.loop).result()

    @property
    def max_model_len(self) -> int:
        return int(self.engine.vllm_config.model_config.max_model_len)


class VLLMRunner:
    def __init__(self, vl: AsymSpecVL, views: dict[EngineSpec, EngineView]):
        self.vl, self.views = vl, views
        self.speculative = next(s for s in views if s.drafter is not None)
        self.methods = tuple(m for m in METHODS if self._spec_of(METHODS[m]) in views)

    @classmethod
    def load(cls, settings: ServeSettings, loop: asyncio.AbstractEventLoop) -> "VLLMRunner":
        """Start the engines (blocking: call it from a worker thread)."""
        configure_environment()
        drafter, verifier = resolve("drafter", settings.drafter), resolve("verifier", settings.verifier)
        pair = ModelPair.load(drafter, verifier)
        specs = [EngineSpec(verifier, drafter, settings.K)] + ([EngineSpec(drafter, images=True)]
                                                               if settings.drafter_engine else [])
        views = {}
        try:
            for spec in specs:
                views[spec] = EngineView(start_engine(spec, settings), loop)
        except BaseException:
            for view in views.values():
                shut_down(view.engine.engine_core, view.engine.shutdown)
            raise
        backend = VLLMBackend(pair, drafter, verifier, None, settings.dtype, 1, {})
        backend.engines = EngineCache(_not_served, capacity=len(views))
        backend.engines.live.update(views)
        names = {"drafter": drafter, "verifier": verifier, "text_drafter": None, "backend": "vllm"}
        return cls(AsymSpecVL(pair, backend, names), views)

    def _spec_of(self, method: Method) -> EngineSpec:
        if method.name in SPECULATIVE_ENGINE_MODES:
            return self.speculative
        return EngineSpec(self.speculative.drafter, images=True)

    def context_of(self, method: Method, cfg: AsymSpecConfig):
        length = self.views[self._spec_of(method)].max_model_len
        return lambda model: length

    def engine_request(self, enc: EncodedRequest, method: Method, cfg: AsymSpecConfig) -> tuple[dict, object, str]:
        """(prompt, SamplingParams, mode) as the vLLM backend submits them (blocking: the drafter engine's prompt
        takes a vision-tower RPC)."""
        return self.vl.backend.served_request(enc, method, cfg)

    async def stream(self, enc: EncodedRequest, method: Method, cfg: AsymSpecConfig) -> AsyncIterator[Progress]:
        prompt, params, mode = await asyncio.to_thread(self.engine_request, enc, method, cfg)
        engine = self.views[self._spec_of(method)].engine
        start = time.perf_counter()
        async for out in engine.generate(prompt, params, f"asv-serve-{next(_request_ids)}"):
            row = VLLMBackend._row(out, method, mode, time.perf_counter() - start) if out.finished else None
            yield Progress(list(out.outputs[0].token_ids), row)

    async def engine_gauges(self) -> dict[str, float]:
        """Requests each engine's front end holds, and the asymspec drafter's live rows inside the engine."""
        gauges = {f"unfinished:{_role(s)}": v.engine.output_processor.get_num_unfinished_requests()
                  for s, v in self.views.items()}
        counters = await self.views[self.speculative].engine.collective_rpc("asymspec_counters")
        gauges["drafter_rows:speculative"] = counters[0]["live_requests"]
        return gauges

    async def check_health(self) -> None:
        for view in self.views.values():
            await view.engine.check_health()

    def close(self) -> None:
        for view in self.views.values():
            shut_down(view.engine.engine_core, view.engine.shutdown)


def start_engine(spec: EngineSpec, settings: ServeSettings):
    """An AsyncLLM for `spec` with the vLLM backend's engine settings and the server's engine options."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from vllm_patches.worker_extension import WORKER_EXTENSION

    kwargs = dict(CPU_DEFAULTS) if on_cpu() else {}
    kwargs.update(dtype=engine_dtype(settings.dtype), seed=0, disable_log_stats=True, trust_remote_code=False,
                  worker_extension_cls=WORKER_EXTENSION, **settings.engine_kwargs)
    if spec.images:
        kwargs.update(limit_mm_per_prompt={"image": settings.max_images, "video": 0}, enable_mm_embeds=True,
                      gpu_memory_utilization=settings.drafter_memory)
    elif settings.drafter_engine and "gpu_memory_utilization" not in settings.engine_kwargs:
        kwargs["gpu_memory_utilization"] = 0.9 - settings.drafter_memory  # vLLM's 0.9, less the drafter's share
    if spec.drafter is not None:
        kwargs["speculative_config"] = {"method": "asymspec", "model": spec.drafter, "num_speculative_tokens": spec.K,
                                        "draft_tensor_parallel_size": kwargs.get("tensor_parallel_size", 1)}
    return AsyncLLM.from_engine_args(AsyncEngineArgs(model=spec.model, **kwargs))


def _role(spec: EngineSpec) -> str:
    return "speculative" if spec.drafter is not None else "drafter"


def _not_served(spec: EngineSpec):
    raise ConfigError(f"this server runs no engine for {spec}: its engines start with the server")
