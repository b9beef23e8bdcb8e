"""uvicorn as `asymspec-vl serve` runs it: bounded connections, header and body read timeouts, and a drain that ends
the requests still running when --drain-timeout expires.

uvicorn bounds neither how long a client may take to send its headers or its body (a header line every 2 s, or a
body at 1 byte/s, holds a connection for ever) nor how many connections it holds. `LimitedProtocol` (uvicorn's
httptools protocol) does:
  header timeout   from the connection (or the end of the previous response) to the end of the request's headers
  body timeout     from the end of the headers to the end of the body
  max connections  a connection over the bound gets 503 and is closed at once
A request cut by a timeout gets 408 (if no response has started) and its connection is closed. These answers are
written by the protocol, not the app, but carry the same OpenAI error object.

`DrainingServer` tells the app when uvicorn starts its graceful shutdown (SIGTERM): requests still running
`drain_timeout_s` later end with ServerShuttingDownError (chat.py); uvicorn itself waits DRAIN_GRACE_S longer for
those last answers to go out before it cancels what is left."""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .http_errors import RequestReadTimeoutError, ServerBusyError, error_body, status_of
from .settings import ServeSettings

DRAIN_GRACE_S = 5.0
LINGER_S = 2.0  # after a refusal: input still arriving is read and dropped this long before the close


def raw_error(error: Exception) -> bytes:
    """A whole HTTP/1.1 response carrying error's OpenAI error object, that closes the connection."""

    status = status_of(error)
    body = json.dumps(error_body(error)).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header timeout, a body timeout and a connection bound (`limits`)."""

    limits: ServeSettings

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._timer = None
        if len(self.connections) > self.limits.max_connections:
            self._refuse(
                ServerBusyError(
                    f"the server holds its limit of {self.limits.max_connections} connections; "
                    "try again in a moment"
                )
            )
            return
        self._arm(self.limits.header_timeout_s, "headers")

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if getattr(
            self, "_refused", False
        ):  # lingering after a refusal: dropped, never parsed
            return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._timer is None:  # a request on a kept-alive connection
            self._arm(self.limits.header_timeout_s, "headers")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.limits.body_timeout_s, "body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a queued request has its headers already
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._arm(self.limits.header_timeout_s, "headers")

    def _arm(self, seconds: float, part: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expired, seconds, part)

    def _disarm(self) -> None:
        if getattr(self, "_timer", None) is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, seconds: float, part: str) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        self.logger.info(
            "asymspec-vl serve: closed a connection from %s whose request %s took over %s s",
            self.client,
            part,
            seconds,
        )
        error = RequestReadTimeoutError(
            f"the request's {part} did not arrive within {seconds} s"
        )
        started = (
            self.cycle is not None and self.cycle.response_started and part == "body"
        )
        if started:  # the app answered already (e.g. 413 before the end of the body): stop reading
            self.transport.close()
        else:
            self._refuse(error)

    def _refuse(self, error: Exception) -> None:
        """Write the error and close. A client still sending would make an immediate close reset the connection
        (unread input), and a reset can discard the answer before the client reads it; so the write side is shut
        first, what still arrives is dropped, and the connection closes LINGER_S later (a lingering close)."""
        self._disarm()
        self._refused = True
        self.transport.write(raw_error(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, calling on_drain() (in the event loop) when its graceful shutdown starts."""

    def __init__(self, config: uvicorn.Config, on_drain: Callable[[], None]):
        super().__init__(config)
        self.on_drain = on_drain

    async def shutdown(self, sockets=None) -> None:
        self.on_drain()
        await super().shutdown(sockets)


def build_server(app, settings: ServeSettings, host: str, port: int) -> DrainingServer:
    """The uvicorn server of `app` with the settings' limits; SIGTERM drains it for settings.drain_timeout_s."""
    protocol = type("LimitedProtocol", (LimitedProtocol,), {"limits": settings})
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        http=protocol,
        timeout_graceful_shutdown=settings.drain_timeout_s + DRAIN_GRACE_S,
    )
    return DrainingServer(config, app.state.serve.begin_drain)
