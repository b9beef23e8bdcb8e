"""serve/server.py in process: the raw error answers the protocol writes itself, and a real uvicorn server from
build_server (a trivial ASGI app, a loopback port, a thread) with short limits: a silent connection and a slow body
get 408 naming the part that was late, a connection over the bound gets 503 at once, a kept-alive connection is
timed again after its answer, and a shutdown tells the app to drain."""

import asyncio
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from asymspec_vl.serve.http_errors import (
    RequestReadTimeoutError,
    ServerBusyError,
    error_body,
)
from asymspec_vl.serve.server import (
    DRAIN_GRACE_S,
    LimitedProtocol,
    build_server,
    raw_error,
)
from asymspec_vl.serve.settings import ServeSettings

LIMITS = dict(
    header_timeout_s=0.4, body_timeout_s=0.4, max_connections=2, drain_timeout_s=3.0
)


def split(response: bytes):
    head, body = response.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("ascii").split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


@pytest.mark.parametrize(
    "error, status",
    [
        (ServerBusyError("busy"), "503 Service Unavailable"),
        (RequestReadTimeoutError("late"), "408 Request Timeout"),
    ],
)
def test_raw_error_is_a_whole_response_that_closes(error, status):
    line, headers, body = split(raw_error(error))
    assert line == f"HTTP/1.1 {status}"
    assert headers == {
        "content-type": "application/json",
        "content-length": str(len(body)),
        "connection": "close",
    }
    assert json.loads(body) == error_body(error)


class App:
    """A trivial ASGI app: 200 "ok" after reading the whole body; state.serve records drains."""

    def __init__(self):
        self.drains = []
        self.state = SimpleNamespace(
            serve=SimpleNamespace(
                begin_drain=lambda: self.drains.append(time.monotonic())
            )
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"2")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def served():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = App()
    server = build_server(
        app, ServeSettings(drafter="d", verifier="v", **LIMITS), "127.0.0.1", port
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    yield SimpleNamespace(port=port, app=app, server=server)
    server.should_exit = True
    thread.join(10)


def connect(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    return c


def read_all(c) -> bytes:
    out = b""
    while chunk := c.recv(65536):
        out += chunk
    return out


def test_the_server_carries_the_settings_limits(served):
    config = served.server.config
    assert (
        issubclass(config.http, LimitedProtocol)
        and config.http.limits.header_timeout_s == 0.4
    )
    assert config.timeout_graceful_shutdown == LIMITS["drain_timeout_s"] + DRAIN_GRACE_S


def test_a_silent_connection_gets_408_naming_the_headers(served):
    with connect(served.port) as c:
        t0 = time.monotonic()
        status, _, body = split(read_all(c))
        waited = time.monotonic() - t0
    assert status == "HTTP/1.1 408 Request Timeout"
    assert (
        "the request's headers did not arrive within 0.4 s"
        in json.loads(body)["error"]["message"]
    )
    assert 0.3 < waited < 4


def test_a_slow_body_gets_408_naming_the_body(served):
    with connect(served.port) as c:
        c.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nab")
        status, _, body = split(read_all(c))
    assert status == "HTTP/1.1 408 Request Timeout"
    assert (
        "the request's body did not arrive within 0.4 s"
        in json.loads(body)["error"]["message"]
    )


def test_a_kept_alive_connection_is_answered_then_timed_again(served):
    with connect(served.port) as c:
        c.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        answered = b""
        while not answered.endswith(b"ok"):
            answered += c.recv(65536)
        assert answered.startswith(b"HTTP/1.1 200")
        status, _, _ = split(
            read_all(c)
        )  # then silent: timed from the end of the answer
    assert status == "HTTP/1.1 408 Request Timeout"


def test_a_connection_over_the_bound_gets_503_at_once(served):
    held = [connect(served.port) for _ in range(2)]
    try:
        for c in held:  # both accepted and served
            c.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            assert c.recv(65536).startswith(b"HTTP/1.1 200")
        with connect(served.port) as extra:
            t0 = time.monotonic()
            status, _, body = split(read_all(extra))
            assert time.monotonic() - t0 < 0.3  # before any header timeout
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert "limit of 2 connections" in json.loads(body)["error"]["message"]
    finally:
        for c in held:
            c.close()


def test_a_shutdown_tells_the_app_to_drain(served):
    assert served.app.drains == []
    served.server.should_exit = True
    deadline = time.monotonic() + 10
    while not served.app.drains:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert len(served.app.drains) == 1
