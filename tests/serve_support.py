"""Test helpers for `asymspec-vl serve`: a server in a subprocess on a free 127.0.0.1 port, and request bodies."""

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "demo" / "examples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data_url(path_or_bytes, media_type: str = "image/png") -> str:
    data = (
        path_or_bytes
        if isinstance(path_or_bytes, bytes)
        else Path(path_or_bytes).read_bytes()
    )
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def chat_body(question: str, image_url: str | list[str], **fields) -> dict:
    """A chat completion body: one user message with the image part(s) and the question."""
    urls = [image_url] if isinstance(image_url, str) else image_url
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls] + [
        {"type": "text", "text": question}
    ]
    return {
        "model": "asymspec-vl",
        "messages": [{"role": "user", "content": content}],
        **fields,
    }


class ServerProcess:
    """`asymspec-vl serve ARGS --port P` in a subprocess, its output in a log file. While it loads, `loading` keeps
    what /health and a chat completion answered (the server listens before its models are ready)."""

    def __init__(self, args: list[str], log: Path, api_key: str | None = None):
        self.port, self.api_key = free_port(), api_key
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "serve",
            *args,
            "--port",
            str(self.port),
        ]
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        full_env.pop("ASYMSPEC_VL_API_KEY", None)
        if (
            api_key is not None
        ):  # the key through the environment, as the README's command takes it
            full_env["ASYMSPEC_VL_API_KEY"] = api_key
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT
            )
        self.loading: list[tuple[str, int, dict | None]] = []

    def wait_ready(
        self, timeout: float = 600.0, probe_body: dict | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.proc.returncode}:\n{self.tail()}"
                )
            try:
                health = httpx.get(self.url + "/health", timeout=10)
            except httpx.TransportError:
                time.sleep(1)
                continue
            if health.status_code == 200:
                return
            self.loading.append(("health", health.status_code, _json(health)))
            if probe_body is not None and not any(
                kind == "chat" for kind, _, _ in self.loading
            ):
                chat = httpx.post(
                    self.url + "/v1/chat/completions",
                    json=probe_body,
                    timeout=10,
                    headers=self.headers,
                )
                self.loading.append(("chat", chat.status_code, _json(chat)))
            time.sleep(1)
        raise TimeoutError(
            f"the server was not ready after {timeout} s:\n{self.tail()}"
        )

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def terminate(self) -> int:
        """SIGTERM to the server process alone (its engine processes are its to stop); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def served(
    args: list[str],
    log: Path,
    api_key: str | None = None,
    probe_body: dict | None = None,
):
    """A module fixture's body: the server ready, then (after the module) stopped by SIGTERM, which must exit 0."""
    proc = ServerProcess(args, log, api_key=api_key)
    try:
        proc.wait_ready(probe_body=probe_body)
        yield proc
    finally:
        code = proc.terminate()
        print(proc.tail())
        assert code == 0


def _json(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return None


def metric(text: str, name: str, **labels) -> float | None:
    """The value of one sample of a Prometheus text exposition (None when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return sample.value
    return None


STEP_KEYS = {"index", "delta", "logprobs", "finish_reason", "token_ids"}


def check_stream_shape(events: list[dict], whole: dict) -> None:
    """A stream as vLLM's serving_chat sends it (issue 47 item 7): the role chunk (logprobs, finish_reason and
    prompt_token_ids null), then per step {content} with logprobs and token_ids null, the last one with finish_reason
    and stop_reason and the last step's text (vLLM's test_chat_streaming asserts the last delta has content); no
    usage key unless asked; the contents join to `whole`'s (the same request unstreamed) answer."""
    first, steps = events[0], events[1:]
    assert first["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert "prompt_token_ids" in first and first["prompt_token_ids"] is None
    assert not any("usage" in e for e in events)
    for e in steps[:-1]:
        (c,) = e["choices"]
        assert set(c) == STEP_KEYS and c["finish_reason"] is None, c
        assert set(c["delta"]) == {"content"} and c["token_ids"] is None
    (last,) = steps[-1]["choices"]
    (answer,) = whole["choices"]
    assert set(last) == STEP_KEYS | {"stop_reason"}, last
    assert last["finish_reason"] == answer["finish_reason"] == "length"
    assert last["delta"]["content"] and last["stop_reason"] is None
    joined = "".join(e["choices"][0]["delta"]["content"] for e in steps)
    assert joined == answer["message"]["content"]


def check_completion_fields(reply: dict) -> None:
    """vLLM answers model_dump(): every field of its ChatCompletionResponse, None ones as null (clients index
    prompt_logprobs, stop_reason, ... unguarded)."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponse,
        ChatCompletionResponseChoice,
        ChatMessage,
    )
    from vllm.entrypoints.openai.engine.protocol import UsageInfo

    choice = ChatCompletionResponseChoice(index=0, message=ChatMessage(role="a"))
    ref = ChatCompletionResponse(model="m", choices=[choice], usage=UsageInfo())
    ref = ref.model_dump()
    got = reply["choices"][0]
    assert set(ref) <= set(reply), set(ref) - set(reply)
    assert set(ref["choices"][0]) <= set(got), set(ref["choices"][0]) - set(got)
    assert set(ref["choices"][0]["message"]) <= set(got["message"])
    assert (reply["prompt_logprobs"], reply["prompt_token_ids"]) == (None, None)
    assert (got["logprobs"], got["stop_reason"], got["token_ids"]) == (None,) * 3
