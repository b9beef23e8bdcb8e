"""Prometheus metrics of `asymspec-vl serve` (/metrics), in a registry of their own.

Counters (rate() them): requests by method and finish reason, errors by type, and per method the tokens emitted,
steps, drafts and accepted drafts, δ-fused tokens. Gauges: requests in flight, tokens/s over the last minute, per
method the acceptance rate (accepted / drafted) and mean accepted length (emitted / steps) since the start, the
captioner cache's hits and misses, and what the engines hold (read from them at each scrape). Histograms: time to
first token and request latency.

Beside them, vLLM's own spec-decode counters with vLLM's names and labels (vllm/v1/spec_decode/metrics.py,
labels model_name and engine as vllm/v1/metrics/loggers.py sets them), so that dashboards built for `vllm serve`
read this server (and vLLM's token counters and latency histograms: vllm_latency.py):
vllm:spec_decode_num_drafts_total (steps that drafted), ..._num_draft_tokens_total,
..._num_accepted_tokens_total and ..._num_accepted_tokens_per_pos_total{position}, over every speculative method
(asymspec, sd, scd). vLLM counts them each step; here each request adds its own when it finishes."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from ..core.limits import LIMITS
from ..core.loop import RowOutput
from ..core.trace import FUSED
from .vllm_gauges import VLLMRequestCounter, gauge_families
from .vllm_latency import VLLMLatency

WINDOW_S = 60.0
PREFIX = "asymspec_"


class ServeMetrics:
    def __init__(
        self, model_name: str = "asymspec-vl", K: int = LIMITS.speculative_tokens
    ):
        self.registry = CollectorRegistry()
        r, p = self.registry, PREFIX
        self.vllm = VLLMSpecDecodeCounters(r, model_name, K)
        self.vllm_latency = VLLMLatency(r, model_name)  # vllm_latency.py
        self.model_name, self.vllm_requests = (
            model_name,
            VLLMRequestCounter(r, model_name),
        )
        self.scheduler: dict[
            str, float
        ] = {}  # vLLM's scheduler gauges the runner read at this scrape (vllm_gauges)
        self.in_flight = Gauge(
            p + "requests_in_flight", "chat completions being answered", registry=r
        )
        self.requests = Counter(
            p + "requests",
            "chat completions answered",
            ["method", "finish_reason"],
            registry=r,
        )
        self.errors = Counter(
            p + "errors",
            "requests answered with an error, by error type",
            ["type"],
            registry=r,
        )
        self.tokens = Counter(
            p + "generated_tokens", "tokens emitted", ["method"], registry=r
        )
        self.steps = Counter(p + "steps", "decoding steps", ["method"], registry=r)
        self.drafted = Counter(
            p + "drafted_tokens", "draft tokens verified", ["method"], registry=r
        )
        self.accepted = Counter(
            p + "accepted_tokens", "draft tokens accepted", ["method"], registry=r
        )
        self.fused = Counter(
            p + "fused_tokens",
            "tokens chosen by delta-fusion at a rejection",
            ["method"],
            registry=r,
        )
        self.first_token = Histogram(
            p + "time_to_first_token_seconds",
            "request start to its first token",
            registry=r,
        )
        self.latency = Histogram(
            p + "request_latency_seconds", "request start to its last token", registry=r
        )
        self.recent: deque[tuple[float, int]] = (
            deque()
        )  # (time, tokens) of requests finished in the last WINDOW_S
        self.totals: dict[
            str, list[int]
        ] = {}  # method -> [drafted, accepted, emitted, steps]
        self.cache: dict[
            str, object
        ] = {}  # captioner field -> its CachedCaptioner (hits, misses)
        self.engine: dict[
            str, float
        ] = {}  # figures the runner read from its engines at this scrape
        self.registry.register(_Derived(self))

    def finished(self, method: str, row: RowOutput) -> None:
        s = row.stats
        self.requests.labels(method, row.finish_reason).inc()
        for counter, n in (
            (self.tokens, s.emitted),
            (self.steps, s.steps),
            (self.drafted, s.drafted),
            (self.accepted, s.accepted),
            (self.fused, row.sources.count(FUSED)),
        ):
            counter.labels(method).inc(n)
        totals = self.totals.setdefault(method, [0, 0, 0, 0])
        for i, n in enumerate((s.drafted, s.accepted, s.emitted, s.steps)):
            totals[i] += n
        self.recent.append((time.monotonic(), s.emitted))
        self.vllm.observe(row)
        self.vllm_requests.count(row.finish_reason)

    def ended(self, method: str, reason: str) -> None:
        """A request that ended without a finished row (client gone, timeout)."""
        self.requests.labels(method, reason).inc()
        self.vllm_requests.count(reason)

    def error(self, error: BaseException) -> None:
        self.errors.labels(type(error).__name__).inc()

    def tokens_per_s(self) -> float:
        while self.recent and self.recent[0][0] < time.monotonic() - WINDOW_S:
            self.recent.popleft()
        return sum(n for _, n in self.recent) / WINDOW_S

    def render(self) -> bytes:
        return generate_latest(self.registry)


class VLLMSpecDecodeCounters:
    """vLLM's SpecDecodingProm counters (one engine, index 0), fed with finished requests' statistics."""

    def __init__(self, registry, model_name: str, K: int):
        labels, values = ["model_name", "engine"], [model_name, "0"]

        def counter(name: str, doc: str):
            return Counter(name, doc, labels, registry=registry).labels(*values)

        self.drafts = counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."
        )
        self.draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."
        )
        self.accepted = counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
        )
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels + ["position"],
            registry=registry,
        )
        self.per_pos = [per_pos.labels(*values, str(i)) for i in range(K)]

    def observe(self, row: RowOutput) -> None:
        s = row.stats
        if (
            not s.drafted
        ):  # floor and the drafter alone draft nothing (vLLM counts no drafts then)
            return
        self.drafts.inc(s.steps)
        self.draft_tokens.inc(s.drafted)
        self.accepted.inc(s.accepted)
        for counter, n in zip(self.per_pos, s.accepted_at):
            counter.inc(n)


class _Derived:
    """Gauges computed at scrape time."""

    def __init__(self, metrics: ServeMetrics):
        self.m = metrics

    def collect(self):
        m, p = self.m, PREFIX
        yield GaugeMetricFamily(
            p + "tokens_per_second",
            f"tokens emitted per second over the last {WINDOW_S:.0f} s",
            value=m.tokens_per_s(),
        )
        rate = GaugeMetricFamily(
            p + "acceptance_rate",
            "accepted / drafted since the start",
            labels=["method"],
        )
        length = GaugeMetricFamily(
            p + "mean_accepted_length",
            "emitted / steps since the start",
            labels=["method"],
        )
        for method, (drafted, accepted, emitted, steps) in sorted(m.totals.items()):
            rate.add_metric([method], accepted / drafted if drafted else 0.0)
            length.add_metric([method], emitted / steps if steps else 0.0)
        yield rate
        yield length
        cache = GaugeMetricFamily(
            p + "captioner_cache", "captioner cache lookups", labels=["field", "result"]
        )
        for field, captioner in sorted(m.cache.items()):
            cache.add_metric([field, "hit"], getattr(captioner, "hits", 0))
            cache.add_metric([field, "miss"], getattr(captioner, "misses", 0))
        yield cache
        engine = GaugeMetricFamily(
            p + "engine_requests",
            "requests the engines hold: unfinished in an engine's "
            "front end, or rows of the asymspec drafter",
            labels=["what", "engine"],
        )
        for key, value in sorted(m.engine.items()):
            engine.add_metric(key.split(":", 1), value)
        yield engine
        yield from gauge_families(m.model_name, m.scheduler)
