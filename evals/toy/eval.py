"""The toy world's Table-3-style evaluation: every method variant on the held-out set, accuracy per question
type (read / sum / mult) and overall, acceptance rate, mean accepted length, share of delta-fused tokens
and tokens/s; through the shared resumable runner (evals/jobs.py) and summary writers."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.trace import FUSED
from asymspec_vl.inputs.prompts import Request
from asymspec_vl.timing import warm_up
from asymspec_vl.toy import world

from ..jobs import (
    BatchedWork,
    Job,
    ResultsLog,
    elapsed_shares,
    failed,
    resume_note,
    run_jobs,
)
from ..summary import SPEED_COLUMNS, summarize, write_summary

if TYPE_CHECKING:
    from asymspec_vl.inputs.prompts import Request

BENCHMARK = "toy"
BASE = AsymSpecConfig(
    max_new_tokens=48
)  # the product's defaults; answers are under 25 tokens
FUSED_COLUMN = "fused %"


@dataclass(frozen=True)
class Variant:
    """One row of the table: a method and its decoding settings."""

    key: str  # the runner's method label
    label: str  # the table's row label
    method: str  # AsymSpecVL method
    changes: dict = field(
        default_factory=dict
    )  # AsymSpecConfig fields changed from BASE

    def config(self, base: AsymSpecConfig = BASE) -> AsymSpecConfig:
        return base.replace(**self.changes)


def variants() -> list[Variant]:
    """The table's rows: the baselines, AsymSpec at K = 2, 4 and beta = 0, 1, and the fused bonus."""
    rows = [
        Variant("drafter", "VL drafter alone", "drafter"),
        Variant("floor", "Floor", "floor"),
        Variant("sd", "SD (K=2)", "sd"),
        Variant("scd", "SCD (K=2, β=1)", "scd"),
    ]
    for K in (2, 4):
        for beta in (0.0, 1.0):
            rows.append(
                Variant(
                    f"asymspec-K{K}-b{beta:g}",
                    f"AsymSpec K={K} β={beta:g}",
                    "asymspec",
                    {"K": K, "beta": beta},
                )
            )
    for K in (2, 4):
        rows.append(
            Variant(
                f"asymspec-K{K}-b1-fused",
                f"AsymSpec K={K} β=1 fused bonus",
                "asymspec",
                {"K": K, "beta": 1.0, "bonus": "fused"},
            )
        )
    return rows


VARIANTS = {v.key: v for v in variants()}


def request_of(ex: world.ToyExample) -> Request:
    """The pipeline's request: the drafter gets the image, the verifier the caption (no OCR: the digits
    are the only text in the image, and reading them is the drafter's job)."""

    return Request(ex.image(), ex.question, caption=ex.caption)


def record_of(
    ex: world.ToyExample, res, elapsed_s: float | None = None, batch: int = 1
) -> dict:
    """The runner record of one example and method (the runner adds id and method). elapsed_s: this
    request's share of a batch's decoding time (tokens/s then pools to the batch's throughput)."""
    prediction = world.extract_answer(res.text)
    stats = res.stats.to_dict()
    if elapsed_s is not None:
        stats["elapsed_s"] = elapsed_s
    return {
        "benchmark": BENCHMARK,
        "qtype": ex.qtype,
        "question": ex.question,
        "target": ex.target,
        "response": res.text,
        "prediction": prediction,
        "correct": prediction == ex.target,
        "finish_reason": res.finish_reason,
        "fused": sum(t.source == FUSED for t in res.trace),
        "token_ids": res.token_ids,
        "batch": batch,
        "stats": stats,
    }


def decode_group(vl, group: list[Job], base: AsymSpecConfig = BASE) -> list[dict]:
    """Records of one batch of jobs (one variant): decoded together by one generate_batch call."""
    v = VARIANTS[group[0].method]
    results = vl.generate_batch(
        [request_of(j.payload) for j in group], v.method, v.config(base)
    )
    return [
        failed(res) or record_of(j.payload, res, share, len(group))
        for j, res, share in zip(group, results, elapsed_shares(results))
    ]


def evaluate(
    vl,
    examples: list[world.ToyExample],
    keys: list[str],
    log: ResultsLog,
    batch: int = 50,
    base: AsymSpecConfig = BASE,
    progress: bool = True,
    warm: bool = False,
) -> list[dict]:
    """Run (or resume) every example x variant, `batch` requests per decoding call; return the records,
    variant by variant. warm: first run each variant's method once, untimed (timing.warm_up)."""
    jobs = [Job(ex.uid, key, ex) for key in keys for ex in examples]
    done = log.done_keys()
    note = resume_note(jobs, done, log.path)
    if note:
        print(note, file=sys.stderr)
    if (
        warm and len(done) < len(jobs) and examples
    ):  # untimed: no variant's tokens/s pays the first-call costs
        first = request_of(examples[0])
        warm_up(
            vl,
            [VARIANTS[k].method for k in keys],
            first.image,
            first.question,
            caption=first.caption,
        )
    work = BatchedWork(jobs, done, batch, lambda group: decode_group(vl, group, base))
    label = f"toy: {len(examples)} questions × {len(keys)} variants"
    return run_jobs(
        jobs,
        work,
        log,
        desc=label,
        progress=progress,
        base=lambda j: {
            "benchmark": BENCHMARK,
            "qtype": j.payload.qtype,
            "target": j.payload.target,
        },
    )


def table(records: list[dict], keys: list[str]) -> tuple[list[dict], list[str]]:
    """Rows: accuracy per question type and overall, n, errors, speed, acceptance, fused share."""
    groups = {q: (lambda r, q=q: r.get("qtype") == q) for q in world.QTYPES}
    rows = summarize(
        records,
        groups,
        keys,
        {k: VARIANTS[k].label if k in VARIANTS else k for k in keys},
    )
    for row, key in zip(rows, keys):
        mine = [r for r in records if r["method"] == key]
        emitted = sum(
            (r.get("stats") or {}).get("emitted", 0) for r in mine
        )  # error records have no stats
        row[FUSED_COLUMN] = (
            100.0 * sum(r.get("fused", 0) for r in mine) / emitted if emitted else None
        )
    return rows, [
        "method",
        *world.QTYPES,
        "Overall",
        "n",
        "errors",
        *SPEED_COLUMNS,
        FUSED_COLUMN,
    ]


def write_outputs(
    out: Path, records: list[dict], keys: list[str], title: str = "Toy world (held-out)"
) -> tuple[str, dict]:
    """table.md / .csv / .json and the charts under out; returns the Markdown table and the paths."""
    rows, columns = table(records, keys)
    paths = write_summary(
        rows, columns, out, "table", title, [*world.QTYPES, "Overall"]
    )
    return paths["md"].read_text(), paths


def quick_heldout(
    drafter: str | Path,
    verifier: str | Path,
    n: int,
    keys: tuple[str, ...] = (
        "drafter",
        "floor",
        "asymspec-K2-b1",
        "asymspec-K2-b1-fused",
    ),
) -> dict:
    """Held-out accuracy of a freshly trained pair (for the training manifest): {variant: {qtype: %}}."""

    from asymspec_vl.api import AsymSpecVL  # lazy: loads torch

    vl = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(verifier), device="cpu", dtype="float32"
    )
    with tempfile.TemporaryDirectory() as tmp:
        records = evaluate(
            vl,
            world.heldout(n),
            list(keys),
            ResultsLog(Path(tmp) / "results.jsonl"),
            progress=False,
        )
    rows, _ = table(records, list(keys))
    return {
        key: {
            c: (round(row[c], 1) if row[c] is not None else None)
            for c in (*world.QTYPES, "Overall", "acceptance rate", FUSED_COLUMN)
        }
        for key, row in zip(keys, rows)
    }
