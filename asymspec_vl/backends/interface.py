"""The interface both backends implement, as the API uses them (transformers: hf/hf_backend.py; vLLM:
vllm/vllm_backend.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..core.config import AsymSpecConfig
from ..core.loop import RowOutput
from ..core.methods import Method
from ..core.request_plan import RequestPlan
from ..inputs.prompts import EncodedRequest


class Backend(Protocol):
    name: str  # "hf" | "vllm"

    def plan_request(self, method: Method, cfg: AsymSpecConfig) -> RequestPlan:
        """The request's plan: the method and config, and the engine that runs them (made once per request)."""

    def context_length(self, model: str, plan: RequestPlan) -> int:
        """The context window `model` ("drafter", "sd_drafter", "verifier") has in a run of the plan."""

    def run(
        self,
        reqs: list[EncodedRequest],
        plan: RequestPlan,
        on_step: Callable[[list[RowOutput]], None] | None = None,
    ) -> list[RowOutput]:
        """Decode validated requests of one plan together; one the run fails comes back with finish_reason
        "error" beside the others' results; each row carries the plan back (RowOutput.plan). on_step(rows so
        far) after every decoding step (a row's `done` set at its last); an exception it raises stops the
        decoding and propagates."""

    def close(self) -> None:
        """Release what the backend holds (engines, device memory)."""
