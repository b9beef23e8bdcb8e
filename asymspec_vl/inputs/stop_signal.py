"""A stop signal for a request's encoding on a worker thread: the server sets it when it gives the request up (its
timeout, the drain after SIGTERM, its client gone), and the encoding loops check it once per message, so no thread
works on for a request nobody waits for (asyncio cannot cancel a thread; the check is how it stops)."""

from __future__ import annotations

import threading
from contextvars import ContextVar

_STOP: ContextVar[threading.Event | None] = ContextVar(
    "asymspec_encoding_stop", default=None
)


class EncodingAbandoned(Exception):
    """The request this encoding was for was given up: nobody reads this error (its caller has already answered)."""


def check_stop() -> None:
    """EncodingAbandoned when the running encoding's stop signal is set (nothing outside stoppable())."""
    stop = _STOP.get()
    if stop is not None and stop.is_set():
        raise EncodingAbandoned("the request was given up while it was being encoded")


def stoppable(stop: threading.Event, fn, *args):
    """fn(*args) with check_stop() reading `stop` (run it on the worker thread: asyncio.to_thread(stoppable, ...))."""
    token = _STOP.set(stop)
    try:
        return fn(*args)
    finally:
        _STOP.reset(token)
