"""The doctor's shared pieces: a report row (Check), the requests every check decodes, and the comparison of two
backends' results (tokens, sources, step counts)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..inputs.prompts import Request
from .backends import AttentionRun


@dataclass
class Check:
    name: str
    backend: str
    result: (
        str  # "ok", "failed" or "skipped" (this machine cannot run it; detail says why)
    )
    detail: str

    @classmethod
    def of(cls, name: str, backend: str, passed: bool, detail: str) -> Check:
        return cls(name, backend, "ok" if passed else "failed", detail)

    @property
    def failed(self) -> bool:
        return self.result == "failed"

    def as_dict(self) -> dict:
        return {**self.__dict__, "ok": self.result == "ok"}


START: list[float] = []  # time.monotonic() when the doctor started (cli.run_doctor)


def say(line: str) -> None:
    """A progress line on stderr (stdout holds the report only), with the minutes since the doctor started."""
    minutes = (time.monotonic() - START[0]) / 60 if START else 0.0
    print(f"doctor [{minutes:4.1f} min]: {line}", file=sys.stderr, flush=True)


def requests():
    """Image requests of different sizes and one text-only request (x_full without an image)."""

    out = []
    for seed in range(5):
        rs = np.random.RandomState(seed)
        h, w = rs.randint(32, 160, 2)
        image = Image.fromarray((rs.rand(h, w, 3) * 255).astype("uint8"))
        out.append(
            Request(
                image,
                f"What is shown in figure {seed}?",
                caption="a chart with bars " * (1 + seed % 3),
                ocr=" ".join(str(x) for x in rs.randint(0, 99, seed)),
            )
        )
    out.append(
        Request(
            question="What is the answer?",
            full_context="The answer is 42, said the table.",
            compressed_context="a table",
        )
    )
    return out


def summary(results) -> list[tuple]:
    """(tokens, sources, steps, accepted) of each GenerationResult or backend RowOutput."""
    return [
        (
            list(r.token_ids),
            [t.source for t in r.trace] if hasattr(r, "trace") else list(r.sources),
            r.stats.steps,
            r.stats.accepted,
        )
        for r in results
    ]


def compare(name: str, run: AttentionRun, got, expected) -> Check:
    """Every request equal in tokens, sources and step counts (required in float32, reported in bf16)."""
    same = sum(g == e for g, e in zip(summary(got), summary(expected)))
    detail = f"{same}/{len(expected)} requests equal (tokens, sources, steps)"
    errors = [r for r in got if r.finish_reason == "error"]
    if errors:
        return Check.of(
            name,
            run.label,
            False,
            f"{len(errors)} request(s) failed: {errors[0].error}"[:300],
        )
    if not run.exact:
        return Check.of(
            name, run.label, True, detail + " (bf16: reported, not required)"
        )
    return Check.of(name, run.label, same == len(expected), detail)
