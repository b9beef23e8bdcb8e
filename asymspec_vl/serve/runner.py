"""What the server needs from a backend (vllm_runner.py: continuous batching on AsyncLLM engines; hf_runner.py:
transformers, one batch at a time): validated requests in, the tokens of each step out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from ..api import AsymSpecVL
from ..core.config import AsymSpecConfig
from ..core.logprobs import TokenLogprob
from ..core.loop import RowOutput
from ..core.methods import Method
from ..core.request_plan import RequestPlan
from ..inputs.prompts import EncodedRequest


@dataclass
class Progress:
    """A request after a decoding step: every token so far; `row` once it finished (its tokens, per-token sources,
    statistics, finish_reason "stop" | "length" | "error" and the error message, and its logprobs when asked)."""

    token_ids: list[int]
    row: RowOutput | None = None
    logprobs: list[TokenLogprob] | None = (
        None  # one per token so far when cfg.logprobs is set
    )


class Runner(Protocol):
    vl: AsymSpecVL  # the model pair (tokenizer, processor) and its backend
    methods: tuple[str, ...]  # the methods this server runs

    def plan(self, method: Method, cfg: AsymSpecConfig) -> RequestPlan:
        """The request's plan on this server's engines (made once per request, where the server prepares it)."""

    def context_of(self, plan: RequestPlan) -> Callable[[str], int]:
        """The context window of each model ("drafter", "sd_drafter", "verifier") in a run of the plan."""

    def stream(self, enc: EncodedRequest, plan: RequestPlan) -> AsyncIterator[Progress]:
        """Decode one request; a Progress after every step it took, the last one with `row` (which carries the
        plan back). Closing the iterator early (a client gone, a timeout) aborts the request in the engine."""

    async def engine_gauges(self) -> dict[str, float]:
        """Figures read from the engines for /metrics (e.g. requests they hold)."""

    async def scheduler_gauges(self) -> dict[str, float]:
        """vLLM's scheduler gauges for /metrics (vllm_gauges.py): running, waiting, and kv_cache_usage where the
        backend keeps vLLM's paged cache."""

    async def check_health(self) -> None:
        """Raise if an engine is dead."""

    def close(self) -> None:
        """Shut the engines down."""
