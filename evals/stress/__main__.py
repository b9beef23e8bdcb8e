"""The long differential stress run of the vLLM path against the transformers backend (tiny models, CPU build).

    python -m asymspec_vl.evals.stress [--seconds 600] [--seed 0] [--cases N] [--no-tp] [--gpu-shaped MODE]
        [--pairs same|cross|mix|real] [--out FILE]
    python -m asymspec_vl.evals.stress --shrink (--seed S | --workload JSON)

Draws workload after workload (seeds --seed, --seed + 1, ...; see workload.py) until --seconds have passed or
--cases ran (by default every second one GPU-shaped: compiled and first traced at the whole budget, GPU budgets,
seeded sampled rows; see workload.py; by default every third one cross-family: the embedded pair `embedded-llama`,
two vocabularies, on the engine and the transformers side alike, its sampled rows compared as one vocabulary's
are, the rows the engine refuses across the map skipped and counted by reason, a, b, q compared in the drafter's
ids and t in the verifier's, see hf_side.py; `--pairs real`: every case on a real-shape pair, in turn by seed
(hf_side.REAL_ROTATION: tiny random models with the real tokenizers, vocabulary rows, special ids and chat
templates, written once under the models folder's real/; the case line names the pair and its shared set, the
summary counts each pair); in half the seeds the drafter alone's rows too, on its plain engine after the
speculative one's, their tokens and logprobs compared, see drafter_run.py), prints one line per case
(with the process's resident memory after it) and at the end the cases run, requests compared (drafter rows;
cross-family: sampled rows, skips) and every mismatch with the workload that reproduces it
(`--seed S --cases 1`, or `--workload JSON`). Exit status 1 if any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
import torch

from asymspec_vl.cli import HelpFormatter
from asymspec_vl.toy.tiny import write_tiny_models

from .case import RESULT_PREFIX, CaseReport, run_case
from .hf_side import REAL, REAL_ROTATION, Reference
from .shrink import shrink
from .workload import Workload, draw, unserved_across_map, with_pair


def model_paths(root: Path) -> dict:
    """The tiny verifier / VL drafter under root (written there first if missing)."""

    if not (root / "verifier" / "config.json").exists():
        write_tiny_models(root, seed=0)
    return {
        "root": root,
        "verifier": root / "verifier",
        "vl_drafter": root / "vl_drafter",
    }


def describe(w: Workload) -> str:
    e = w.engine
    modes = "/".join(sorted({r.mode for r in w.rows}))
    return (
        f"seed={w.seed} block={e.block_size} K={e.K} seqs={e.max_num_seqs} budget={e.max_num_batched_tokens} "
        f"prefix_cache={e.prefix_caching} preempt={e.preempt} small_pool={e.small_pool} tp={e.tp} "
        f"processes={e.processes} compiled={e.compiled} pair={e.pair} rows={len(w.rows)} ({modes})"
        + skips(w)
    )


def skips(w: Workload) -> str:
    """What a cross-family case will skip (the rows the vLLM engine refuses across a map), for its case line."""
    if w.engine.pair == "same":
        return ""
    counts = Counter(filter(None, map(unserved_across_map, w.rows)))
    if not counts:
        return ", none skipped"
    return (
        f", skipped {told(counts)} (refused by the vLLM engine across a vocabulary map)"
    )


def told(counts: dict) -> str:
    """{"plain": 2, "sampled floor": 1} -> "2 plain, 1 sampled floor" (reasons in sorted order)."""
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))


def across_map(reports: list[CaseReport]) -> str:
    """The run's cross-family totals (the summary's second line; "" when no case ran across a map)."""
    cross = [r for r in reports if r.vocabulary and not r.vocabulary["identity"]]
    if not cross:
        return ""
    skipped = sum((Counter(r.skipped) for r in cross), Counter())
    return (
        f"across a vocabulary map: {len(cross)} case(s), {sum(r.compared for r in cross)} requests compared, "
        f"{sum(r.sampled for r in cross)} of them sampled; skipped: {told(skipped) or 'none'}\n"
    )


def drafter_alone(reports: list[CaseReport]) -> str:
    """The run's drafter-alone totals (a summary line; "" when no drafter row ran)."""
    ran = [r for r in reports if r.drafter]
    if not ran:
        return ""
    return (
        f"drafter alone: {sum(r.drafter for r in ran)} rows compared in {len(ran)} case(s), largest logprob error "
        f"{max(r.max_error.get('logprobs', 0.0) for r in ran):.1e}\n"
    )


def real_pairs(reports: list[CaseReport]) -> str:
    """The run's totals per real-shape pair (a summary line; "" when no case ran on one)."""
    by: dict[str, list[CaseReport]] = {}
    for r in reports:
        if r.vocabulary.get("pair") in REAL:
            by.setdefault(r.vocabulary["pair"], []).append(r)
    if not by:
        return ""
    return (
        "real-shape pairs: "
        + "; ".join(
            f"{name} {len(rs)} case(s), {sum(r.compared for r in rs)} requests, "
            f"{sum(r.logit_steps for r in rs)} logit checks, {sum(len(r.mismatches) for r in rs)} mismatch(es)"
            for name, rs in sorted(by.items())
        )
        + "\n"
    )


def vocabularies(v: dict) -> str:
    """The case line's head naming the pair's vocabularies: a real-shape pair by name and its shared set, any
    cross-family pair's shared set ("" for the tiny same-family models)."""
    name = f"{v['pair']} " if v and v.get("pair") in REAL else ""
    if v and not v["identity"]:
        return f"{name}cross-family ({v['shared']} shared of {v['drafter']} / {v['verifier']}), "
    return f"{name}one vocabulary ({v['shared']} shared), " if name else ""


def line(report: CaseReport) -> str:
    status = "OK" if not report.mismatches else f"{len(report.mismatches)} MISMATCH(ES)"
    cross = vocabularies(report.vocabulary)
    sampled = ", ".join(
        f"{n} {what}"
        for n, what in ((report.sampled, "sampled"), (report.drafter, "drafter alone"))
        if n
    )
    sampled = f" ({sampled})" if sampled else ""
    errors = " ".join(f"{k} {e:.1e}" for k, e in report.max_error.items())
    return cross + (
        f"{report.compared}/{report.requests} requests{sampled}, {report.logit_steps} logit checks (max rel. error "
        f"{errors}), {report.resumptions} resumptions, "
        f"{report.seconds['engine']:.0f} s vLLM + {report.seconds['reference']:.0f} s transformers: {status}"
    )


def draw_case(seed: int, args) -> Workload:
    gpu_shaped = args.gpu_shaped == "only" or (
        args.gpu_shaped == "mix" and seed % 2 == 1
    )
    cross = args.pairs == "cross" or (args.pairs == "mix" and seed % 3 == 2)
    w = draw(seed, tp=not args.no_tp, gpu_shaped=gpu_shaped, drafter=True)
    if args.pairs == "real":
        return with_pair(w, REAL_ROTATION[seed % len(REAL_ROTATION)])
    return with_pair(w, "cross") if cross else w


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m asymspec_vl.evals.stress",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    ap.add_argument(
        "--seconds",
        type=float,
        default=600,
        help="stop starting cases after this many seconds",
    )
    ap.add_argument("--seed", type=int, default=0, help="the first workload's seed")
    ap.add_argument(
        "--cases", type=int, default=None, help="run at most this many cases"
    )
    ap.add_argument(
        "--no-tp",
        action="store_true",
        help="in-process engines only (no TP=2, no worker processes)",
    )
    ap.add_argument(
        "--models",
        type=Path,
        default=None,
        help="tiny models folder (default: written to a temp dir)",
    )
    ap.add_argument(
        "--logit-steps",
        type=int,
        default=6,
        help="verification steps per request whose a / b are checked",
    )
    ap.add_argument(
        "--workload",
        default=None,
        help="run this one workload (JSON, as a mismatch prints it)",
    )
    ap.add_argument(
        "--shrink",
        action="store_true",
        help="reduce the failing workload of --workload (or of --seed) to a smaller one that still fails",
    )
    ap.add_argument(
        "--gpu-shaped",
        choices=("mix", "only", "off"),
        default="mix",
        help="GPU-shaped workloads: every second case (mix), every case, or none",
    )
    ap.add_argument(
        "--pairs",
        choices=("mix", "same", "cross", "real"),
        default="mix",
        help="the pair each case loads: the tiny same-family models, the embedded cross-family pair "
        "(embedded-llama), every third case cross-family (mix), or the real-shape pairs in turn by seed (real: "
        "real tokenizers, vocabularies and chat templates on tiny random models; "
        + ", ".join(REAL_ROTATION)
        + ")",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="append each case report (JSON lines) here",
    )
    args = ap.parse_args(argv)
    paths = model_paths(
        args.models or Path(tempfile.mkdtemp(prefix="asymspec-stress-"))
    )

    torch.set_num_threads(
        1
    )  # tiny models: more OpenMP threads only spin against the engine (and other processes)

    references: dict[str, Reference] = {}

    def reference(w: Workload) -> Reference:
        """The transformers side of w's pair (loaded once)."""
        if w.engine.pair not in references:
            references[w.engine.pair] = Reference(paths, w.engine.pair)
        return references[w.engine.pair]

    if args.shrink:
        w = (
            Workload.from_json(args.workload)
            if args.workload
            else draw_case(args.seed, args)
        )
        best = shrink(
            w,
            lambda trial: run_case(trial, paths, reference(trial), args.logit_steps),
        )
        print(
            f"smallest failing workload ({len(best.rows)} rows): --workload '{best.to_json()}'"
        )
        return 0
    if (
        args.workload
    ):  # one case (also how engines with worker processes run: see case.py)
        w = Workload.from_json(args.workload)
        report = run_case(w, paths, reference(w), args.logit_steps, here=True)
        print(RESULT_PREFIX + report.to_json(), flush=True)
        return int(bool(report.mismatches))
    start, reports = time.time(), []
    seed = args.seed
    while time.time() - start < args.seconds and (
        args.cases is None or len(reports) < args.cases
    ):
        w = draw_case(seed, args)
        print(f"case {len(reports) + 1}: {describe(w)}", flush=True)
        report = run_case(w, paths, reference(w), args.logit_steps)
        reports.append(report)
        rss = (
            psutil.Process().memory_info().rss / 2**30
        )  # flat over a long run (closed engines released)
        print(f"  {line(report)} ({rss:.2f} GiB resident)", flush=True)
        for m in report.mismatches:
            print(
                f"  - {m.what} row {m.row}: {m.detail[:600]}"
                + (f" [{m.known}]" if m.known else ""),
                flush=True,
            )
        if args.out:
            with args.out.open("a") as f:
                f.write(report.to_json() + "\n")
        seed += 1
    bad = [r for r in reports if r.mismatches]
    print(
        f"\ncases run: {len(reports)}, requests compared: {sum(r.compared for r in reports)}, logit checks: "
        f"{sum(r.logit_steps for r in reports)}, mismatches: {sum(len(r.mismatches) for r in reports)} in "
        f"{len(bad)} case(s), seconds: {time.time() - start:.0f}\n{drafter_alone(reports)}"
        f"{across_map(reports)}{real_pairs(reports)}",
        end="",
    )
    for r in bad:
        print(
            f"reproduce: python -m asymspec_vl.evals.stress --seed {r.seed} --cases 1 --gpu-shaped {args.gpu_shaped}"
            f" --pairs {args.pairs}"
            f"{' --no-tp' if args.no_tp else ''}   # or --workload '{r.workload}'"
        )
    return int(bool(bad))


if __name__ == "__main__":
    sys.exit(main())
