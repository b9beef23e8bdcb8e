"""A dead engine is never an ordinary 500: the server answers 503 from then on, /health tells the truth, and the
process stops with a non-zero status so that a supervisor restarts it; and an unexpected error is answered
without re-raising, so that the client's keep-alive connection stays open.

vLLM's AsyncLLM raises EngineDeadError for every request once its engine core died (and `check_health` raises
it); nothing in the engine restarts it. `EngineWatch` polls the runner's health every `period_s` seconds and is
told by the request path when a request met the dead engine. EngineDeadError is death at once; any other failed
check (one that raises something else, or gives no answer within `timeout_s`) is not: one slow or failed check
says nothing of the engine, so only `dead_after` failed checks in a row are death (EngineUnresponsiveError), and a
check that passes starts the count again. Starlette's handler for `Exception` runs in its
ServerErrorMiddleware, which re-raises after sending the 500 and so makes uvicorn drop the connection:
`AnswerUnexpected` (inside it) answers instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.responses import Response

logger = logging.getLogger(__name__)


def is_engine_dead(error: BaseException) -> bool:
    """vLLM's EngineDeadError (by name: the transformers backend runs without vLLM), or one it caused."""
    while error is not None:
        if type(error).__name__ == "EngineDeadError":
            return True
        error = error.__cause__
    return False


class EngineUnresponsiveError(RuntimeError):
    """The engine failed `dead_after` health checks in a row (none raised EngineDeadError): taken as dead."""


class EngineWatch:
    """Notes the engine's death once: logs it and calls on_death (the server's stop with status 1)."""

    def __init__(
        self, period_s: float = 2.0, timeout_s: float = 10.0, dead_after: int = 3
    ):
        self.period_s, self.timeout_s, self.dead_after = period_s, timeout_s, dead_after
        self.failures = 0  # failed health checks since the last one that passed
        self.dead: BaseException | None = None
        self.on_death: Callable[[BaseException], None] = lambda e: None

    def died(self, error: BaseException) -> None:
        if self.dead is not None:
            return
        self.dead = error
        logger.error(
            "asymspec-vl serve: the vLLM engine died (%s: %s); every request is answered 503 and the "
            "server exits with status 1",
            type(error).__name__,
            error,
        )
        self.on_death(error)

    def failed(self, error: BaseException) -> None:
        """A health check failed without EngineDeadError: death only at `dead_after` failures in a row."""
        self.failures += 1
        why = (
            f"no answer within {self.timeout_s} s"
            if isinstance(error, TimeoutError)
            else f"{type(error).__name__}: {error}"
        )
        logger.warning(
            "asymspec-vl serve: the engine's health check failed (%s), %d of %d in a row",
            why,
            self.failures,
            self.dead_after,
        )
        if self.failures >= self.dead_after:
            self.died(
                EngineUnresponsiveError(
                    f"{self.failures} health checks failed in a row, the last: {why}"
                )
            )

    async def run(self, check_health: Callable[[], Awaitable[None]]) -> None:
        """Poll check_health until the engine dies (or the task is cancelled)."""
        while self.dead is None:
            await asyncio.sleep(self.period_s)
            try:
                await asyncio.wait_for(check_health(), self.timeout_s)
            except Exception as e:  # TimeoutError: no answer within timeout_s
                if is_engine_dead(e):
                    self.died(e)
                else:
                    self.failed(e)
            else:
                self.failures = 0


class AnswerUnexpected:
    """ASGI middleware: an exception that escapes the app before the response started is answered by
    answer(error) -> Response (the connection kept); after it started there is nothing left to answer."""

    def __init__(self, app, answer: Callable[[BaseException], Response]):
        self.app, self.answer = app, answer

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:
            if started:
                raise
            await self.answer(e)(scope, receive, send)
