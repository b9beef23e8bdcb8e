"""vLLM's token counters and latency histograms in /metrics, with vLLM 0.19's names, labels (model_name, engine "0")
and buckets (vllm/v1/metrics/loggers.py, PrometheusStatLogger), so the stock dashboards' token and latency panels
read this server:
  vllm:prompt_tokens_total                      prompt tokens of each request, counted at its first token (the
                                                prompt the method's engine reads: usage.prompt_tokens)
  vllm:generation_tokens_total                  tokens emitted, counted as each step's arrive
  vllm:time_to_first_token_seconds              arrival -> first token
  vllm:inter_token_latency_seconds              between a request's steps (vLLM: between the engine steps that gave
                                                it tokens; a speculative step's tokens arrive together). vLLM 0.19's
                                                name for what earlier releases called time_per_output_token_seconds
  vllm:request_time_per_output_token_seconds    per request: (last token - first token) / (tokens - 1), 0 for one
  vllm:e2e_request_latency_seconds              arrival -> finish
Times are the server's (time.monotonic from the request's arrival), as vLLM's front end measures arrival."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter, Histogram

# vllm/v1/metrics/loggers.py, PrometheusStatLogger.__init__
TTFT_BUCKETS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
TOKEN_GAP_BUCKETS = [  # inter_token_latency and request_time_per_output_token
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
]  # fmt: skip
REQUEST_LATENCY_BUCKETS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip


class VLLMLatency:
    """The counters and histograms, labelled for one model on engine "0"."""

    def __init__(self, registry, model_name: str):
        labels, values = ["model_name", "engine"], [model_name, "0"]

        def counter(name: str, doc: str):
            return Counter(name, doc, labels, registry=registry).labels(*values)

        def histogram(name: str, doc: str, buckets: list[float]):
            made = Histogram(name, doc, labels, registry=registry, buckets=buckets)
            return made.labels(*values)

        self.prompt_tokens = counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed."
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.first_token = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.token_gap = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TOKEN_GAP_BUCKETS,
        )
        self.per_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_GAP_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )

    def clock(
        self,
        arrival: float,
        prompt_tokens: int,
        now: Callable[[], float] = time.monotonic,
    ) -> RequestClock:
        return RequestClock(self, arrival, prompt_tokens, now)


class RequestClock:
    """One request's times, kept as vLLM's RequestStateStats keeps them: its first and last token's."""

    def __init__(self, m: VLLMLatency, arrival: float, prompt_tokens: int, now):
        self.m, self.arrival, self.prompt_tokens, self.now = (
            m,
            arrival,
            prompt_tokens,
            now,
        )
        self.first: float | None = None
        self.last = 0.0
        self.tokens = 0

    def step(self, tokens_so_far: int) -> None:
        """A step arrived with the request's tokens so far (a step that added none is not a token's arrival)."""
        new = tokens_so_far - self.tokens
        if new <= 0:
            return
        t = self.now()
        if self.first is None:  # vLLM: the prefill's step
            self.first = t
            self.m.prompt_tokens.inc(self.prompt_tokens)
            self.m.first_token.observe(t - self.arrival)
        else:
            self.m.token_gap.observe(t - self.last)
        self.last, self.tokens = t, tokens_so_far
        self.m.generation_tokens.inc(new)

    def finished(self) -> None:
        t = self.now()
        self.m.e2e.observe(t - self.arrival)
        decode = self.last - self.first if self.first is not None else 0.0
        self.m.per_token.observe(decode / (self.tokens - 1) if self.tokens > 1 else 0.0)
