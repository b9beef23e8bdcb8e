"""EngineCore.asymspec_scheduler_gauges: the scheduler's figures vLLM's Prometheus logger publishes (running and
waiting requests, KV-cache usage: vllm/v1/core/sched/scheduler.py make_stats), read on demand as an engine-core
utility call (AsyncMPClient.call_utility_async), so a server that runs its engines with disable_log_stats can still
publish vLLM's standard gauges. A new method: nothing of vLLM's is wrapped."""

from __future__ import annotations

NAME = "asymspec_scheduler_gauges"


def scheduler_gauges(core) -> dict[str, float]:
    """{"running", "waiting", "kv_cache_usage"} of this engine core's scheduler (Scheduler.get_request_counts,
    kv_cache_manager.usage, as make_stats reads them)."""
    scheduler = core.scheduler
    running, waiting = scheduler.get_request_counts()
    return {
        "running": running,
        "waiting": waiting,
        "kv_cache_usage": scheduler.kv_cache_manager.usage,
    }


def patch_engine_core() -> None:
    from vllm.v1.engine.core import EngineCore  # lazy: loads vLLM

    if not hasattr(EngineCore, NAME):
        setattr(EngineCore, NAME, scheduler_gauges)
