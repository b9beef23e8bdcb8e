"""A dead engine is never an ordinary 500: the server answers 503 from then on, /health tells the truth, and the
process stops with a non-zero status so that a supervisor restarts it; and an unexpected error is answered
without re-raising, so that the client's keep-alive connection stays open.

vLLM's AsyncLLM raises EngineDeadError for every request once its engine core died (and `check_health` raises
it); nothing in the engine restarts it. `EngineWatch` polls the runner's health every `period_s` seconds and is
told by the request path when a request met the dead engine. Starlette's handler for `Exception` runs in its
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


class EngineWatch:
    """Notes the engine's death once: logs it and calls on_death (the server's stop with status 1)."""

    def __init__(self, period_s: float = 2.0):
        self.period_s = period_s
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

    async def run(self, check_health: Callable[[], Awaitable[None]]) -> None:
        """Poll check_health until the engine dies (or the task is cancelled)."""
        while self.dead is None:
            await asyncio.sleep(self.period_s)
            try:
                await check_health()
            except Exception as e:
                if is_engine_dead(e):
                    self.died(e)


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
