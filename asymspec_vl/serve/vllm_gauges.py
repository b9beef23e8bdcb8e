"""vLLM's standard scheduler gauges and request counter in /metrics, with vLLM's names and labels
(vllm/v1/metrics/loggers.py: model_name, engine "0"), so dashboards and vLLM's own metrics tests read this server:
  vllm:num_requests_running   requests the engines are decoding (vLLM: the scheduler's running list)
  vllm:num_requests_waiting   requests queued in the engines, not yet scheduled
  vllm:kv_cache_usage_perc    the speculative engine's KV-cache usage, 1 = full (vLLM backend; the transformers
                              backend keeps no paged cache and leaves it out)
  vllm:request_success_total{finished_reason}  finished requests by vLLM's reason: stop, length, error, and abort
                              (a client that left, counted when it left)
The runner reads the gauges at each scrape (Runner.scheduler_gauges)."""

from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

ABORT = "abort"  # vLLM's FinishReason.ABORT label
VLLM_REASONS = ("stop", "length", "error", ABORT)
GAUGES = {
    "running": (
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
    ),
    "waiting": (
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
    ),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
    ),
}


class VLLMRequestCounter:
    """vllm:request_success_total{model_name, engine, finished_reason}, every reason present from the start."""

    def __init__(self, registry, model_name: str):
        counter = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "engine", "finished_reason"],
            registry=registry,
        )
        self.by_reason = {r: counter.labels(model_name, "0", r) for r in VLLM_REASONS}

    def count(self, reason: str) -> None:
        """A finished request's reason (ours: stop, length, error; any other ending is an abort)."""
        self.by_reason[reason if reason in self.by_reason else ABORT].inc()


def gauge_families(model_name: str, gauges: dict[str, float]):
    """The GaugeMetricFamily of each gauge the runner read (running, waiting, kv_cache_usage)."""
    for key, (name, doc) in GAUGES.items():
        if key in gauges:
            family = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
            family.add_metric([model_name, "0"], float(gauges[key]))
            yield family
