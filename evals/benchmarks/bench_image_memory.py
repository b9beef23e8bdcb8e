"""Benchmark: what one image request can make `asymspec-vl serve` allocate (issue 33's PNG zlib bomb).

    python -m evals.benchmarks.bench_image_memory [--side 7900] [--backend hf] [--out FILE] [-- SERVER ARGS...]

Starts the server (embedded pair, --ocr none) in a subprocess, then sends a PNG of side x side black pixels (a
~182 KB zlib bomb under the 64-megapixel cap) alone, then two in one request, then four single-bomb requests at
once (the server-wide pixel budget, --max-server-pixels), then a side x side JPEG alone; each with caption "" and
ocr "". The server's resident memory (its process and children, sampled every 20 ms) is reported per case as
baseline -> peak -> after (2 s later), with the HTTP statuses. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from serve_support import ServerProcess, chat_body  # noqa: E402

from asymspec_vl.commands import positive_int  # noqa: E402

SETTLE_S = 2  # seconds after the replies before "after" is read


def bomb(side: int, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.new("RGB", (side, side)).save(
        buf, fmt, **({"optimize": True} if fmt == "PNG" else {"quality": 50})
    )
    return (
        f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"
    )


def rss(pid: int) -> int:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def measured(server: ServerProcess, body: dict, copies: int = 1) -> dict:
    """baseline, peak and after (GB) of the server's RSS around `copies` concurrent requests, and their statuses."""
    base, peak, done = rss(server.proc.pid), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss(server.proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(copies) as pool:
        replies = list(
            pool.map(
                lambda _: httpx.post(
                    server.url + "/v1/chat/completions", json=body, timeout=600
                ),
                range(copies),
            )
        )
    elapsed = time.perf_counter() - start
    time.sleep(SETTLE_S)
    done.set()
    sampler.join()
    gb = 1e9
    errors = [
        r.json().get("error", {}).get("type") for r in replies if r.status_code != 200
    ]
    return {
        "status": [r.status_code for r in replies]
        if copies > 1
        else replies[0].status_code,
        "baseline_gb": round(base / gb, 2),
        "peak_gb": round(peak[0] / gb, 2),
        "after_gb": round(rss(server.proc.pid) / gb, 2),
        "seconds": round(elapsed, 1),
        "error": (errors if copies > 1 else errors[0]) if errors else None,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=positive_int, default=7900)
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "server_args",
        nargs="*",
        help="after --: more `asymspec-vl serve` options (--max-server-pixels N)",
    )
    args = ap.parse_args(argv)
    url = bomb(args.side)
    server = ServerProcess(
        [
            "--backend",
            args.backend,
            "--device",
            "cpu",
            "--ocr",
            "none",
            "--no-caption-cache",
            "--max-tokens",
            "4",
            *args.server_args,
        ],
        Path("/tmp/bench_image_memory.log"),
    )
    try:
        server.wait_ready()
        extras = {"max_tokens": 4, "caption": "", "ocr": ""}
        result = {
            "side": args.side,
            "payload_kb": round(len(url) * 3 / 4 / 1024),
            "one": measured(server, chat_body("What is shown?", url, **extras)),
            "two": measured(
                server,
                chat_body(
                    "What is shown?",
                    [url, url],
                    caption=["", ""],
                    ocr=["", ""],
                    max_tokens=4,
                ),
            ),
            "four_at_once": measured(
                server, chat_body("What is shown?", url, **extras), copies=4
            ),
            "jpeg": measured(
                server, chat_body("What is shown?", bomb(args.side, "JPEG"), **extras)
            ),
        }
    finally:
        server.terminate()
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
