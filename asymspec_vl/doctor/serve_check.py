"""Checks of `asymspec-vl doctor` that start engines of their own: tensor parallelism (TP=2, where two GPUs
exist) against the transformers backend, and a smoke test of `asymspec-vl serve` (the tiny pair on 127.0.0.1, one
chat request with an image, then SIGTERM)."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from ..core.config import AsymSpecConfig
from ..serve.settings import ServeSettings
from .backends import AttentionRun, Verdict
from .cases import Check, compare, requests

SERVE_START_TIMEOUT_S = 600


def tensor_parallel_check(
    paths: dict, run: AttentionRun | None, verdict: Verdict, device: str
) -> Check:
    """asymspec K=2 with tensor_parallel_size=2 (drafter and verifier sharded alike) equal to transformers."""
    from ..api import AsymSpecVL  # lazy: loads torch

    name, label = "tensor parallel (TP=2) asymspec K=2", run.label if run else "-"
    if verdict.result != "run" or run is None:
        return Check(
            name,
            label,
            "skipped" if run is None else verdict.result,
            verdict.reason or "no attention backend runs here",
        )
    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(**names, device=device, dtype=run.dtype)
    vl = AsymSpecVL.from_pretrained(
        **names,
        backend="vllm",
        dtype=run.dtype,
        tensor_parallel_size=2,
        **run.engine_kwargs(),
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=24)
    try:
        return compare(
            name,
            run,
            vl.generate_batch(requests(), "asymspec", cfg),
            hf.generate_batch(requests(), "asymspec", cfg),
        )
    finally:
        vl.backend.close()


def serve_check(paths: dict, on_gpu: bool) -> Check:
    """`asymspec-vl serve` with the tiny pair answers one chat request with an image, and stops on SIGTERM."""
    name = "asymspec-vl serve: one chat request"
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "asymspec_vl.cli",
        "serve",
        "--drafter",
        str(paths["vl_drafter"]),
        "--verifier",
        str(paths["verifier"]),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ocr",
        "none",
        "--no-caption-cache",
        "--max-tokens",
        "16",
    ]
    if on_gpu:
        cmd += [
            "--gpu-memory-utilization",
            "0.5",
        ]  # this process keeps the transformers models on the GPU
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        try:
            detail = _wait_ready(proc, url)
            if detail is None:
                answer = _post(url + "/v1/chat/completions", _chat_body())
                text = answer["choices"][0]["message"]["content"]
                tokens = answer["usage"]["completion_tokens"]
                detail = (
                    None
                    if tokens > 0 and isinstance(text, str)
                    else f"an empty answer: {answer}"
                )
        except (OSError, KeyError, IndexError, ValueError) as e:
            detail = f"{type(e).__name__}: {e}"
        finally:
            code = _stop(proc)
        if detail is None and code != 0:
            detail = f"the server exited with {code} after SIGTERM"
        if detail is not None:
            log.seek(0)
            return Check.of(
                name, "vllm", False, f"{detail}; server log: ...{log.read()[-300:]}"
            )
    return Check.of(
        name, "vllm", True, f"HTTP 200, an answer of {tokens} tokens; exit 0 on SIGTERM"
    )


def _chat_body() -> dict:

    buffer = io.BytesIO()
    requests()[1].image.save(buffer, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [
        {"type": "image_url", "image_url": {"url": image}},
        {"type": "text", "text": "What is shown?"},
    ]
    return {
        "model": ServeSettings("", "").served_model_name,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        "temperature": 0,
    }


def _wait_ready(proc: subprocess.Popen, url: str) -> str | None:
    """None once /health answers 200; else why not."""
    deadline = time.monotonic() + SERVE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the server exited with {proc.returncode} before it was ready"
        try:
            with urllib.request.urlopen(url + "/health", timeout=10) as response:
                if response.status == 200:
                    return None
        except (urllib.error.URLError, OSError):
            pass  # not listening yet, or 503 while the models load
        time.sleep(1)
    return f"the server was not ready after {SERVE_START_TIMEOUT_S} s"


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise ValueError(f"HTTP {e.code}: {e.read()[:300]!r}") from e


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
