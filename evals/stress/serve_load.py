"""A load run of one vLLM `asymspec-vl serve` (embedded pair, CPU build): rounds of concurrent mixed requests
(conversations, seeded sampling, stop strings, logprobs, JSON schemas, and bad constraints: a $ref cycle, an
unknown type, a missing $ref, an unclosed regex, a broken grammar).

    python -m evals.stress.serve_load [--concurrency 64] [--requests 320] [--tokens 8] [--out FILE]

First every good request is sent alone (its reference answer); then rounds of --concurrency requests at once, the
distinct bodies cycled, until --requests were sent. Checked: every good answer equals its reference (text,
finish reason, logprob tokens), every bad one is a 400 naming response_format / structured_outputs, /health is
200 after, and the server's resident memory (its process and children) after each round. Prints one JSON
object; exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from serve_support import EXAMPLES, ServerProcess, data_url  # noqa: E402

IMAGE = data_url(EXAMPLES / "toy-read.png")
QUESTION = "Which number does the yellow circle carry?"
SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["count"],
    "additionalProperties": False,
}
BAD = [
    {
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "cycle",
                "schema": {
                    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                    "$ref": "#/$defs/a",
                },
            },
        }
    },
    {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "o", "schema": {"type": "objekt"}},
        }
    },
    {"structured_outputs": {"json": {"$ref": "#/$defs/missing"}}},
    {"structured_outputs": {"regex": "(abc"}},
    {"structured_outputs": {"grammar": "root ::= ("}},
]


def user(text: str, image: bool = True) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": IMAGE}}] if image else []
    return {"role": "user", "content": parts + [{"type": "text", "text": text}]}


def good_bodies(tokens: int) -> list[dict]:
    """The distinct good requests: methods x (greedy, seeded sampling, stops, logprobs, a schema, a conversation)."""
    bodies = []
    for method in ("asymspec", "sd", "floor"):
        base = {
            "messages": [user(QUESTION)],
            "max_tokens": tokens,
            "method": method,
            "caption": "",
            "ocr": "",
        }
        bodies += [
            base,
            {**base, "temperature": 0.9, "seed": 7},
            {**base, "temperature": 0.7, "top_p": 0.9, "seed": 11},
            {**base, "stop": ["3", "e"]},
            {**base, "logprobs": True, "top_logprobs": 2},
            {
                **base,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "count", "schema": SCHEMA},
                },
            },
            {
                **base,
                "messages": [
                    user(QUESTION),
                    {"role": "assistant", "content": "It carries 4."},
                    user("And the red square?", image=False),
                ],
            },
        ]
    return [{"model": "asymspec-vl", **b} for b in bodies]


def bad_bodies(tokens: int) -> list[dict]:
    return [
        {
            "model": "asymspec-vl",
            "messages": [user(QUESTION)],
            "max_tokens": tokens,
            "caption": "",
            "ocr": "",
            **b,
        }
        for b in BAD
    ]


def summary(reply: httpx.Response):
    """What must not change under load: status, and for a 200 the text, finish reason and logprob tokens."""
    if reply.status_code != 200:
        error = reply.json().get("error", {})
        return (
            reply.status_code,
            error.get("type"),
            "response_format / structured_outputs" in error.get("message", ""),
        )
    choice = reply.json()["choices"][0]
    tokens = [t["token"] for t in (choice.get("logprobs") or {}).get("content") or []]
    return 200, choice["message"]["content"], choice["finish_reason"], tokens


def rss_gb(pid: int) -> float:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss + sum(
        c.memory_info().rss for c in proc.children(recursive=True)
    )
    return round(total / 1e9, 3)


async def run(args) -> dict:
    server = ServerProcess(
        [
            "--drafter",
            "embedded",
            "--verifier",
            "embedded",
            "--ocr",
            "none",
            "--no-caption-cache",
            "--max-tokens",
            str(args.tokens),
        ],
        Path(args.log),
    )
    try:
        server.wait_ready()
        good, bad = good_bodies(args.tokens), bad_bodies(args.tokens)
        limits = httpx.Limits(
            max_connections=args.concurrency, max_keepalive_connections=args.concurrency
        )
        async with httpx.AsyncClient(
            base_url=server.url, timeout=900, limits=limits
        ) as client:
            post = lambda body: client.post("/v1/chat/completions", json=body)  # noqa: E731
            reference = [summary(await post(b)) for b in good]  # each alone
            start, sent, rounds, mismatches, bad_ok, bad_wrong = (
                time.perf_counter(),
                0,
                [],
                [],
                0,
                [],
            )
            distinct = good + bad
            while sent < args.requests:
                batch = [
                    distinct[(sent + i) % len(distinct)]
                    for i in range(args.concurrency)
                ]
                replies = await asyncio.gather(*(post(b) for b in batch))
                for i, reply in enumerate(replies):
                    k, got = (sent + i) % len(distinct), summary(reply)
                    if k < len(good):
                        if got != reference[k]:
                            mismatches.append(
                                {"body": k, "alone": reference[k], "under_load": got}
                            )
                    elif got == (400, "UnsupportedRequestError", True):
                        bad_ok += 1
                    else:
                        bad_wrong.append({"body": k, "got": got})
                sent += len(batch)
                rounds.append(rss_gb(server.proc.pid))
            health = (await client.get("/health")).status_code
        result = {
            "requests": sent,
            "concurrency": args.concurrency,
            "good_distinct": len(good),
            "bad_distinct": len(bad),
            "good_mismatches": mismatches,
            "bad_400": bad_ok,
            "bad_wrong": bad_wrong,
            "reference_statuses": sorted({r[0] for r in reference}),
            "health_after": health,
            "rss_gb_per_round": rounds,
            "rss_growth_gb": round(rounds[-1] - rounds[0], 3),
            "seconds": round(time.perf_counter() - start, 1),
        }
    finally:
        result_code = server.terminate()
    result["server_exit_code"] = result_code
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=320)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--log", default="/tmp/serve_load.log")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result) + "\n")
    ok = (
        not result["good_mismatches"]
        and not result["bad_wrong"]
        and result["health_after"] == 200
        and result["reference_statuses"] == [200]
        and result["server_exit_code"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
