"""Benchmark: `toy train` reproduces the shipped toy pair.

    python -m asymspec_vl.evals.benchmarks.bench_toy_train [--out DIR] [--n 300] [--workers 2] [--scale 1]

Trains a pair with the recipe recorded in the shipped pair's manifest (asymspec_vl/toy/pair/manifest.json),
prints the wall-clock and CPU seconds of each model's training (the machine may be shared: CPU seconds
are the better guide to an idle machine), whether the weights are bit-identical to the shipped ones
(same seed, same library versions and CPU kind: expected), then the held-out table of both pairs side by
side (accuracy per question type, overall) and the largest per-cell difference in points.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from asymspec_vl.evals.jobs import ResultsLog
from asymspec_vl.evals.toy.eval import evaluate, table

from asymspec_vl.commands import positive_int
from asymspec_vl.toy import PAIR_DIR, world

KEYS = ["drafter", "floor", "asymspec-K2-b1", "asymspec-K4-b1", "asymspec-K2-b1-fused"]


def heldout_count(text: str) -> int:
    """argparse type: a held-out size that asks every question type at least once (the table has a column each)."""
    n = positive_int(text)
    if n < len(world.QTYPES):
        raise argparse.ArgumentTypeError(
            f"--n {n}: at least {len(world.QTYPES)}, one question of each type {world.QTYPES}"
        )
    return n


def table_of(drafter: Path, verifier: Path, n: int, out: Path) -> dict[str, dict]:
    from asymspec_vl import AsymSpecVL  # lazy: loads torch

    vl = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(verifier), device="cpu", dtype="float32"
    )
    records = evaluate(
        vl, world.heldout(n), KEYS, ResultsLog(out / "results.jsonl"), progress=False
    )
    rows, _ = table(records, KEYS)
    return {
        k: {c: row[c] for c in (*world.QTYPES, "Overall")} for k, row in zip(KEYS, rows)
    }


def main(argv: list[str] | None = None) -> int:
    from asymspec_vl.toy.train import ToyTrainConfig, train_pair  # lazy: loads torch

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", default=None, help="where to train (default: a temporary folder)"
    )
    ap.add_argument(
        "--n",
        type=heldout_count,
        default=300,
        help="held-out questions for the comparison (at least one per question type)",
    )
    ap.add_argument("--workers", type=int, default=2, choices=(1, 2))
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="step-count multiplier (1: the shipped recipe)",
    )
    args = ap.parse_args(argv)

    shipped = PAIR_DIR
    recipe = json.loads((shipped / "manifest.json").read_text())
    cfg = ToyTrainConfig.from_dict(recipe["config"]).scaled(args.scale)
    cfg = dataclasses.replace(cfg, eval_n=0)
    out = Path(args.out or tempfile.mkdtemp(prefix="toy-train-"))
    t0 = time.perf_counter()
    manifest = train_pair(out, cfg, workers=args.workers)
    wall = time.perf_counter() - t0
    times = manifest["times"]
    print(
        f"\ntrained in {wall:.0f} s wall ({times['train_cpu_s']:.0f} CPU s in all; drafter "
        f"{times['drafter']['wall_s']:.0f} s wall / {times['drafter']['cpu_s']:.0f} CPU s, verifier "
        f"{times['verifier']['wall_s']:.0f} s wall / {times['verifier']['cpu_s']:.0f} CPU s); shipped pair: "
        f"{recipe['times']['train_wall_s']:.0f} s wall / {recipe['times']['train_cpu_s']:.0f} CPU s"
    )
    for name, digest in manifest["sha256"].items():
        print(
            f"{name}: {'bit-identical to' if digest == recipe['sha256'][name] else 'differs from'} the shipped one"
        )
    print(f"final losses: {manifest['final_loss']} (shipped {recipe['final_loss']})")
    mine = table_of(out / "drafter", out / "verifier", args.n, out / "eval-new")
    ref = table_of(
        shipped / "drafter", shipped / "verifier", args.n, out / "eval-shipped"
    )
    cols = (*world.QTYPES, "Overall")
    print(f"\nheld-out accuracy (%), n={args.n}: reproduced / shipped")
    print(f"{'method':24s}" + "".join(f"{c:>16s}" for c in cols))
    worst = 0.0
    for k in KEYS:
        print(
            f"{k:24s}" + "".join(f"{mine[k][c]:8.1f}/{ref[k][c]:<7.1f}" for c in cols)
        )
        worst = max(worst, *(abs(mine[k][c] - ref[k][c]) for c in cols))
    print(f"largest difference: {worst:.1f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
