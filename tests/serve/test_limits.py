"""`asymspec-vl serve`'s limits on a real server (--backend hf, the embedded pair, 127.0.0.1): a client that sends
its headers or its body too slowly is cut with 408, a connection past --max-connections gets 503, a client gone
mid-body is not logged as an error, and requests still running when --drain-timeout expires end with an OpenAI
error (last: it stops the server)."""

import json
import signal
import socket
import threading
import time

import httpx
import pytest
from serve_support import EXAMPLES, chat_body, data_url, metric, served

FLAGS = [
    "--backend",
    "hf",
    "--device",
    "cpu",
    "--ocr",
    "none",
    "-K",
    "2",
    "--header-timeout",
    "2",
    "--body-timeout",
    "3",
    "--max-connections",
    "6",
    "--drain-timeout",
    "3",
    "--max-tokens",
    "3000",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(FLAGS, tmp_path_factory.mktemp("serve-limits") / "server.log")


def trickle(server, head: bytes, pieces: list[bytes], every: float = 0.5) -> bytes:
    """Send `head`, then one piece every `every` seconds while reading; what the server answered before it
    closed the connection (b"" if it never did, all pieces sent)."""
    reply = b""
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(head)
        for piece in pieces:
            s.settimeout(every)
            try:
                chunk = s.recv(65536)
                if not chunk:
                    return reply
                reply += chunk
            except TimeoutError:
                pass
            try:
                s.sendall(piece)
            except OSError:
                break
        s.settimeout(10)
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except OSError:
            pass
    return reply


def test_headers_sent_one_line_at_a_time_are_cut_with_408(server):
    reply = trickle(
        server,
        b"GET /health HTTP/1.1\r\nHost: x\r\n",
        [b"X-Slow-%d: y\r\n" % i for i in range(40)],
    )
    assert (
        reply.startswith(b"HTTP/1.1 408")
        and b'"type": "RequestReadTimeoutError"' in reply
    ), reply
    assert b"headers did not arrive within 2.0 s" in reply


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(30)
        reply = s.recv(65536)
    assert (
        reply.startswith(b"HTTP/1.1 408")
        and b"headers did not arrive within 2.0 s" in reply
    ), reply


def test_a_body_sent_a_byte_at_a_time_is_cut_with_408(server):
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 40\r\n\r\n"
    )
    reply = trickle(server, head, [b"{"] + [b" "] * 39)
    assert (
        reply.startswith(b"HTTP/1.1 408")
        and b"body did not arrive within 3.0 s" in reply
    ), reply


def test_connections_past_the_bound_get_503_and_the_server_answers_after(server):
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(6)]
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as extra:
            extra.settimeout(10)
            reply = extra.recv(65536)
        assert reply.startswith(b"HTTP/1.1 503") and b"ServerBusyError" in reply, reply
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
    ):  # the held connections are gone once the server saw them close
        if httpx.get(server.url + "/health", timeout=10).status_code == 200:
            break
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_a_client_gone_mid_body_is_not_logged_as_an_error(server):
    before = server.tail(10**7)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(
            b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"messages"'
        )
    deadline = time.monotonic() + 30
    while (
        "left before sending its whole request body"
        not in server.tail(10**7)[len(before) :]
    ):
        assert time.monotonic() < deadline, server.tail()
        time.sleep(0.2)
    after = server.tail(10**7)[len(before) :]
    assert (
        "Traceback" not in after
        and "unexpected error" not in after
        and "ERROR" not in after
    ), after


def test_requests_still_running_when_the_drain_expires_end_with_an_openai_error(server):
    """Last: it stops the module's server. A stream gets a last error event and [DONE]; a JSON request a 503."""
    example = json.loads((EXAMPLES / "examples.json").read_text())[0]
    body = chat_body(
        example["question"],
        data_url(EXAMPLES / example["image"]),
        caption="",
        ocr="",
        max_tokens=3000,
        ignore_eos=True,
    )
    first, events, answers = threading.Event(), [], []

    def stream():
        with httpx.Client(timeout=120) as http:
            with http.stream(
                "POST",
                server.url + "/v1/chat/completions",
                json={**body, "stream": True},
            ) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        if len(events) >= 2:
                            first.set()

    def plain():
        answers.append(
            httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
        )

    readers = [threading.Thread(target=stream), threading.Thread(target=plain)]
    readers[0].start()
    assert first.wait(
        120
    )  # the stream decodes; the JSON request then waits behind its batch (hf: one at a time)
    readers[1].start()
    deadline = time.monotonic() + 60
    while (
        metric(httpx.get(server.url + "/metrics").text, "asymspec_requests_in_flight")
        != 2
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    server.proc.send_signal(signal.SIGTERM)
    for t in readers:
        t.join(120)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["type"], error["code"]) == ("ServerShuttingDownError", 503)
    assert "drain timeout of 3.0 s expired" in error["message"]
    assert all("error" not in json.loads(e) for e in events[:-2])
    (reply,) = answers
    assert (
        reply.status_code == 503
        and reply.json()["error"]["type"] == "ServerShuttingDownError"
    ), reply.text
    assert server.proc.wait(timeout=120) == 0
