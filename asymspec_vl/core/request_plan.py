"""RequestPlan: what one request runs (its method, its config: K, β, γ, sampling; the engine and the mode it runs
in), made once where the request is parsed (the API's generate, the server's prepare) by the backend's
`plan_request`, read by the backend that runs it, and carried back on each result row (RowOutput.plan)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass

from .config import AsymSpecConfig
from .methods import Method


@dataclass(frozen=True)
class RequestPlan:
    """One request's method and config, and where it runs: `engine` is the backend's engine key (vLLM: the
    EngineSpec it runs on; None on transformers, whose one model set runs every method), `mode` how that engine
    runs it (vLLM: "plain", the engine's own sampler, or the per-request mode on a speculative engine, methods.py
    SPECULATIVE_ENGINE_MODES; None on transformers, where loop.py runs the method itself)."""

    method: Method
    cfg: AsymSpecConfig
    engine: Hashable | None = None
    mode: str | None = None

    @property
    def K(self) -> int:
        """The drafts per step."""
        return self.cfg.K

    def with_seed(self, seed: int | None) -> RequestPlan:
        """The same request seeded `seed` (a server's choice i of n): the engine and K stay."""
        return dataclasses.replace(self, cfg=self.cfg.replace(seed=seed))
