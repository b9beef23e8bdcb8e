"""The server's vLLM runner: AsyncLLM engines, every request decoded with the others in flight (continuous batching).

  speculative engine  the verifier as target, the VL drafter as draft model (method "asymspec"): serves asymspec,
                      sd, scd and floor per request, at every K up to the server's -K
  drafter engine      (--drafter-engine) the VL drafter as target: method "drafter"; on a GPU it takes a share of
                      its own (--drafter-memory, a gpu_memory_utilization), started after the speculative one
The backend builds them (vllm_engine.build_engine, as AsyncLLMs seen through EngineView) and fixes the set at start.
A request's plan is the vLLM backend's (VLLMBackend.plan_request, speculative: the engines a server holds), made
once where the server prepares the request; it becomes exactly what the vLLM backend submits
(VLLMBackend.engine_request: prompt, stop and banned tokens, budget, extra_args). Floor reads what SD reads
(x_comp, the same budget): on the speculative engine it is its own request in mode "floor" (no drafts).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

from vllm_patches.hooks.engine_gauges import NAME

from ..api import AsymSpecVL
from ..backends.vllm import drafter_answer
from ..backends.vllm.engine import EngineSpec, configure_environment
from ..backends.vllm.engine_view import EngineView
from ..backends.vllm.sample_logprobs import from_vllm
from ..backends.vllm.vllm_backend import StreamedStats, VLLMBackend
from ..core.config import AsymSpecConfig
from ..core.methods import METHODS, Method
from ..core.request_plan import RequestPlan
from ..inputs.prompts import EncodedRequest
from ..pair.defaults import resolve
from ..pair.model_pair import ModelPair
from .runner import Progress
from .settings import ServeSettings

_request_ids = itertools.count()


class VLLMRunner:
    def __init__(self, vl: AsymSpecVL, views: dict[EngineSpec, EngineView]):
        self.vl, self.views = vl, views
        self.speculative = next(s for s in views if s.drafter is not None)
        self.methods = tuple(m for m in METHODS if self._spec_of(METHODS[m]) in views)

    @classmethod
    def load(
        cls, settings: ServeSettings, loop: asyncio.AbstractEventLoop
    ) -> VLLMRunner:
        """Start the engines (blocking: call it from a worker thread): the vLLM backend's, fixed at start."""
        configure_environment()
        drafter, verifier = (
            resolve("drafter", settings.drafter),
            resolve("verifier", settings.verifier),
        )
        pair = ModelPair.load(drafter, verifier, backend="vllm")
        specs = [EngineSpec(verifier, drafter, settings.K)] + (
            [EngineSpec(drafter, images=True)] if settings.drafter_engine else []
        )
        backend = VLLMBackend(
            pair,
            drafter,
            verifier,
            None,
            settings.dtype,
            settings.engine_kwargs.get("tensor_parallel_size", 1),
            settings.engine_kwargs,
            len(specs),
            settings.drafter_memory if settings.drafter_engine else None,
            loop,
        )
        views = dict(zip(specs, backend.start_engines(specs)))
        names = {
            "drafter": drafter,
            "verifier": verifier,
            "text_drafter": None,
            "backend": "vllm",
        }
        return cls(AsymSpecVL(pair, backend, names), views)

    def _spec_of(self, method: Method) -> EngineSpec:
        """The engine the server runs `method` on (which methods it serves, at start)."""
        return self.vl.backend.engine_for(method, self.speculative.K, speculative=True)[
            0
        ]

    def plan(self, method: Method, cfg: AsymSpecConfig) -> RequestPlan:
        return self.vl.backend.plan_request(method, cfg, speculative=True)

    def context_of(self, plan: RequestPlan):
        length = self.views[plan.engine].max_model_len
        return lambda model: length

    def engine_request(
        self, enc: EncodedRequest, plan: RequestPlan
    ) -> tuple[dict, object]:
        """(prompt, SamplingParams) as the vLLM backend submits them (blocking: a structured output's grammar is
        compiled to check it)."""
        return self.vl.backend.engine_request(enc, plan)

    async def stream(
        self, enc: EncodedRequest, plan: RequestPlan
    ) -> AsyncIterator[Progress]:
        prompt, params = await asyncio.to_thread(self.engine_request, enc, plan)
        engine = self.views[plan.engine].engine
        method, cfg, vmap = plan.method, plan.cfg, self.vl.pair.vmap
        start, labels, seen = (
            time.perf_counter(),
            StreamedStats(method, plan.mode, plan.K, 1),
            0,
        )
        # the drafter alone of a cross-family pair answers in the drafter's ids: moved to the verifier's
        crosses = drafter_answer.speaks_drafter_ids(method, vmap)
        async for out in engine.generate(
            prompt, params, f"asv-serve-{next(_request_ids)}"
        ):
            tokens = list(out.outputs[0].token_ids)
            if out.finished:
                row = VLLMBackend.row(out, plan, time.perf_counter() - start, vmap)
                yield Progress(row.token_ids, row, row.logprobs)
                continue
            # each token's distribution from its streamed label (provisional where outputs of steps arrive merged)
            sources, seen = labels.step(0, len(tokens) - seen)[0], len(tokens)
            lps = (
                from_vllm(out.outputs[0].logprobs, tokens, sources, method.name, cfg)
                if cfg.logprobs is not None
                else None
            )
            if crosses:
                tokens = drafter_answer.tokens(vmap, tokens)
                lps = drafter_answer.logprobs(vmap, lps)
            yield Progress(tokens, None, lps)

    async def engine_gauges(self) -> dict[str, float]:
        """Requests each engine's front end holds, and the asymspec drafter's live rows inside the engine."""
        gauges = {
            f"unfinished:{_role(s)}": v.engine.output_processor.get_num_unfinished_requests()
            for s, v in self.views.items()
        }
        counters = await self.views[self.speculative].engine.collective_rpc(
            "asymspec_counters"
        )
        gauges["drafter_rows:speculative"] = counters[0]["live_requests"]
        return gauges

    async def scheduler_gauges(self) -> dict[str, float]:
        """vLLM's scheduler gauges (vllm_patches/hooks/engine_gauges.py): running and waiting summed over the
        engines, KV-cache usage the speculative engine's."""

        read = {
            s: await v.engine.engine_core.call_utility_async(NAME)
            for s, v in self.views.items()
        }
        return {
            "running": sum(g["running"] for g in read.values()),
            "waiting": sum(g["waiting"] for g in read.values()),
            "kv_cache_usage": read[self.speculative]["kv_cache_usage"],
        }

    async def check_health(self) -> None:
        for view in self.views.values():
            await view.engine.check_health()

    def close(self) -> None:
        self.vl.backend.close()


def _role(spec: EngineSpec) -> str:
    return "speculative" if spec.drafter is not None else "drafter"
