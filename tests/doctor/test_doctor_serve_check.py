"""doctor/serve_check.py: the serve smoke test passes with the tiny pair on vLLM (HTTP 200, an answer, exit 0 on
SIGTERM) and fails, with the server's log, when the server cannot start; the TP=2 check is skipped or failed as
its verdict says without starting an engine; the request it sends carries an image and the served model's name;
an HTTP error is a ValueError naming the status; a server that exits non-zero on SIGTERM is reported."""

import base64
import io
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from asymspec_vl.doctor import serve_check as sc
from asymspec_vl.doctor.backends import AttentionRun, Verdict
from asymspec_vl.serve.settings import ServeSettings


def test_tensor_parallel_is_skipped_or_failed_as_the_verdict_says():
    run = AttentionRun("FLASH_ATTN float32", "FLASH_ATTN", "float32")
    skipped = sc.tensor_parallel_check({}, None, Verdict("skipped", "one GPU"), "cpu")
    assert (skipped.result, skipped.backend, skipped.detail) == (
        "skipped",
        "-",
        "one GPU",
    )
    failed = sc.tensor_parallel_check({}, run, Verdict("failed", "bad config"), "cpu")
    assert (failed.result, failed.backend, failed.detail) == (
        "failed",
        "FLASH_ATTN float32",
        "bad config",
    )


def test_the_chat_request_carries_an_image_and_the_served_name():
    body = sc._chat_body()
    assert body["model"] == ServeSettings("", "").served_model_name
    image, text = body["messages"][0]["content"]
    assert text == {"type": "text", "text": "What is shown?"}
    data = image["image_url"]["url"].removeprefix("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(data))).format == "PNG"
    assert body["max_tokens"] > 0 and body["temperature"] == 0


class Refusing(BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(400)
        self.end_headers()
        self.wfile.write(json.dumps({"error": {"message": "no such model"}}).encode())

    def log_message(self, *args):
        pass


def test_an_http_error_is_a_value_error_naming_the_status():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
        with pytest.raises(ValueError, match="HTTP 400: .*no such model"):
            sc._post(url, {})
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("code", [0, 3])
def test_stop_returns_the_exit_status_after_sigterm(code):
    handler = f"import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit({code}))"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{handler}; print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "up\n"  # the handler is in place
    assert sc._stop(proc) == code and proc.returncode == code


def test_a_server_that_cannot_start_fails_with_its_log():
    # a drafter "path" the server's command line refuses: it exits at once (a missing folder takes vLLM's import)
    check = sc.serve_check(
        {"vl_drafter": "--no-such-option", "verifier": "x"}, on_gpu=False
    )
    assert check.result == "failed" and check.backend == "vllm"
    assert "the server exited with 2 before it was ready" in check.detail
    assert "server log: ..." in check.detail and "--drafter" in check.detail


@pytest.mark.vllm
def test_the_tiny_pair_answers_and_stops_on_sigterm(tiny_models):
    check = sc.serve_check(tiny_models, on_gpu=False)
    assert check.result == "ok", check.detail
    assert check.detail.startswith("HTTP 200, an answer of ")
    assert check.detail.endswith(" tokens; exit 0 on SIGTERM")
