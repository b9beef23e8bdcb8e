"""evals/benchmarks/vllm_bench_serve.py, vLLM's `vllm bench serve` as a module: in this process, against a stand-in
OpenAI chat server that streams three words and a usage chunk to every request, it parses vLLM's own arguments,
runs every prompt and returns vLLM's result (three requests completed, three output tokens each: the usage chunk's
count, not the text's); an unknown argument is an argparse error. The real server under it:
tests/serve/test_clients.py. Never timed: no figure is compared with a speed."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asymspec_vl.evals.benchmarks import vllm_bench_serve

from asymspec_vl.pair.defaults import resolve

pytestmark = pytest.mark.vllm

WORDS = ["one", " two", " three"]


class Chat(BaseHTTPRequestHandler):
    """A chat completions stream: a chunk per word, then one with the usage, then [DONE]."""

    bodies: list = []

    def do_POST(self):
        Chat.bodies.append(
            json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in WORDS]
        chunks.append({"choices": [], "usage": {"completion_tokens": len(WORDS)}})
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_vllms_benchmark_runs_every_prompt_and_returns_its_result(stand_in, tmp_path):
    Chat.bodies.clear()
    result = vllm_bench_serve.main(
        [
            "--backend",
            "openai-chat",
            "--base-url",
            stand_in,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "asymspec-vl",
            "--tokenizer",
            resolve("verifier", "embedded"),
            "--dataset-name",
            "random",
            "--num-prompts",
            "3",
            "--random-input-len",
            "8",
            "--random-output-len",
            "3",
            "--seed",
            "0",
            "--ready-check-timeout-sec",
            "0",
            "--result-dir",
            str(tmp_path),
        ]
    )
    assert result["completed"] == 3 and result["failed"] == 0
    assert result["total_output_tokens"] == 3 * len(WORDS)
    assert len(Chat.bodies) == 3 and {b["model"] for b in Chat.bodies} == {
        "asymspec-vl"
    }


def test_an_unknown_argument_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        vllm_bench_serve.main(["--no-such-option"])
    assert e.value.code == 2 and "--no-such-option" in capsys.readouterr().err
