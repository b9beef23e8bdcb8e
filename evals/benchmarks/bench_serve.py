"""Benchmark: `asymspec-vl serve` under load. Toy-world questions (held-out scenes, their images as data: URLs,
their captions) streamed by 1, 4 and 16 concurrent clients, Floor and AsymSpec side by side: requests/s,
tokens/s, time to first token and p50 / p99 latency, with AsymSpec's acceptance.

    python -m asymspec_vl.evals.benchmarks.bench_serve [--requests 32] [--tokens 48] [--concurrency 1,4,16]
        [--url http://HOST:PORT --api-key KEY | --server-args "--drafter embedded --verifier embedded"] [--out DIR]

Without --url a server is started on a free 127.0.0.1 port with --server-args (the embedded pair on the vLLM
backend by default) and stopped at the end. Each method gets one untimed request first. Time to first token is
measured at the first chunk carrying text; latency at the last chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import numpy as np
from asymspec_vl.evals.report import markdown_table, write_table

from asymspec_vl.commands import comma_list, parse_methods, positive_int
from asymspec_vl.toy import world

METHODS = ("floor", "asymspec")
COLUMNS = [
    "method",
    "concurrency",
    "requests",
    "requests_per_s",
    "tokens_per_s",
    "ttft_p50_s",
    "latency_p50_s",
    "latency_p99_s",
    "acceptance_rate",
    "mean_accepted_length",
]


def bodies(n: int, tokens: int) -> list[dict]:
    """Chat completion bodies of n held-out toy questions (their images as PNG data: URLs)."""
    out = []
    for ex in world.heldout(n):
        png = io.BytesIO()
        ex.image().save(png, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
        out.append(
            {
                "model": "asymspec-vl",
                "max_tokens": tokens,
                "stream": True,
                "caption": ex.caption,
                "ocr": "",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": url}},
                            {"type": "text", "text": ex.question},
                        ],
                    }
                ],
            }
        )
    return out


async def one(http: httpx.AsyncClient, url: str, body: dict) -> dict:
    """Stream one completion: its time to first token, latency, tokens and asymspec statistics."""
    start, first, final = time.perf_counter(), None, {}
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(
                f"HTTP {response.status_code}: {(await response.aread()).decode()[:500]}"
            )
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[len("data: ") :])
            if "error" in event:
                raise RuntimeError(f"the stream failed: {event['error']}")
            choice = (event.get("choices") or [{}])[0]
            if first is None and choice.get("delta", {}).get("content"):
                first = time.perf_counter() - start
            if "asymspec" in event:
                final = event["asymspec"]
    return {
        "ttft": first if first is not None else time.perf_counter() - start,
        "latency": time.perf_counter() - start,
        **final,
    }


async def load(
    url: str, headers: dict, reqs: list[dict], concurrency: int
) -> tuple[float, list[dict]]:
    """Send every request, at most `concurrency` at once; (wall seconds, per-request results)."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=None, headers=headers) as http:

        async def limited(body):
            async with gate:
                return await one(http, url, body)

        start = time.perf_counter()
        results = await asyncio.gather(*(limited(b) for b in reqs))
    return time.perf_counter() - start, results


def row(method: str, concurrency: int, seconds: float, results: list[dict]) -> dict:
    latency, ttft = [r["latency"] for r in results], [r["ttft"] for r in results]
    tokens, drafted = (
        sum(r["emitted"] for r in results),
        sum(r["drafted"] for r in results),
    )
    out = {
        "method": method,
        "concurrency": concurrency,
        "requests": len(results),
        "requests_per_s": len(results) / seconds,
        "tokens_per_s": tokens / seconds,
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "latency_p50_s": float(np.percentile(latency, 50)),
        "latency_p99_s": float(np.percentile(latency, 99)),
    }
    if drafted:
        out["acceptance_rate"] = sum(r["accepted"] for r in results) / drafted
        out["mean_accepted_length"] = tokens / sum(r["steps"] for r in results)
    return out


@contextmanager
def started_server(args: str, api_key: str | None):
    """`asymspec-vl serve ARGS` on a free port until the block ends (SIGTERM: it drains and exits)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **({"ASYMSPEC_VL_API_KEY": api_key} if api_key else {})}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "serve",
            *shlex.split(args),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while proc.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        if proc.poll() is not None:
            raise RuntimeError(
                f"the server exited with {proc.returncode} (run `asymspec-vl serve {args}` to see why)"
            )
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=300)


def run(
    url: str, headers: dict, methods: list[str], levels: list[int], n: int, tokens: int
) -> list[dict]:
    reqs, rows = bodies(n, tokens), []
    for method in methods:
        mine = [{**b, "method": method} for b in reqs]
        asyncio.run(
            load(url, headers, mine[:1], 1)
        )  # untimed: first use of the method's engine paths
        for c in levels:
            seconds, results = asyncio.run(load(url, headers, mine, c))
            rows.append(row(method, c, seconds, results))
            print(markdown_table(rows[-1:], COLUMNS).splitlines()[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", default=None, help="a running server (default: start one)")
    ap.add_argument("--api-key", default=os.environ.get("ASYMSPEC_VL_API_KEY"))
    ap.add_argument(
        "--server-args", default="--drafter embedded --verifier embedded --ocr none"
    )
    ap.add_argument(
        "--requests",
        type=positive_int,
        default=32,
        help="requests per method and concurrency",
    )
    ap.add_argument(
        "--tokens", type=positive_int, default=48, help="max_tokens of each request"
    )
    ap.add_argument(
        "--concurrency",
        type=lambda s: [positive_int(c) for c in comma_list(s)],
        default=[1, 4, 16],
    )
    ap.add_argument("--methods", type=parse_methods, default=",".join(METHODS))
    ap.add_argument("--out", default=None, help="write bench_serve.{md,csv,json} here")
    args = ap.parse_args(argv)

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    levels, methods = args.concurrency, args.methods
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS), flush=True)
    if args.url:
        rows = run(args.url, headers, methods, levels, args.requests, args.tokens)
    else:
        with started_server(args.server_args, args.api_key) as url:
            rows = run(url, headers, methods, levels, args.requests, args.tokens)
    title = f"asymspec-vl serve ({args.requests} toy-world requests x at most {args.tokens} tokens per row)"
    print(f"\n# {title}\n\n" + markdown_table(rows, COLUMNS))
    if args.out:
        write_table(rows, COLUMNS, args.out, "bench_serve", title)


if __name__ == "__main__":
    main()
