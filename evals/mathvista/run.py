"""`asymspec-vl eval mathvista`: the protocol's problems x methods through the resumable runner, then the
Table 3 layout (accuracy per task and overall, tokens/s, acceptance), charts, the official breakdown, a manifest.

Output folder: results.jsonl (one line per problem and method, written as each finishes; both protocols'
verdicts in each line, verdicts.py),
results.fingerprint.json (the settings a resume must match), table.md / .csv / .json, table.png and
table_<task>.png, breakdown.json (official per-category accuracy, per method), manifest.json.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from asymspec_vl.captioners import PrecomputedCaptioner

from asymspec_vl import commands
from asymspec_vl.core.methods import engine_order

from ..jobs import (
    BatchedWork,
    Job,
    ResultsLog,
    elapsed_shares,
    failed,
    resume_note,
    run_jobs,
    writable_folder,
)
from ..manifest import build_manifest, write_manifest
from ..summary import SPEED_COLUMNS, summarize, write_summary
from .corpus import warn_numbers
from .data import data_files, load_problems, sha256_file
from .extraction import RuleExtractor
from .image_source import check_images, open_images
from .llm_extract import LLMExtractor
from .protocol import IMAGE_METHODS, EvalProtocol, build_request, select, task_of
from .scoring import breakdown
from .verdicts import headline, label, verdicts

METHOD_NAMES = {
    "drafter": "VL drafter alone",
    "floor": "Floor",
    "sd": "SD",
    "asymspec": "AsymSpec",
    "scd": "SCD",
}
RESULTS = "results.jsonl"


@dataclass
class Setup:
    """The selected problems and where their images and verifier texts come from (no model loaded)."""

    problems: list
    store: object
    captioner: object
    protocol: EvalProtocol
    text_files: dict[str, Path]


def load_setup(
    images,
    protocol: EvalProtocol,
    limit: int | None = None,
    pids: list[str] | None = None,
    captions: str | None = None,
    ocrs: str | None = None,
    needs_images: bool = True,
) -> Setup:
    """Annotations, captions / OCR texts, the selection, and a check that every selected image exists.
    needs_images False (only methods that never read the image, e.g. floor and sd): no image store is opened
    unless `images` names one, and none is checked."""

    records, store = (
        open_images(images) if needs_images or images is not None else (None, None)
    )
    problems = load_problems(records)
    text_files = {
        "captions": Path(captions or data_files()["captions"]),
        "ocrs": Path(ocrs or data_files()["ocrs"]),
    }
    captioner = PrecomputedCaptioner.from_json(
        text_files["captions"], text_files["ocrs"]
    )
    selected = select(problems, protocol, captioner.has_caption, limit, pids)
    if needs_images:
        check_images(store, selected)
    return Setup(selected, store, captioner, protocol, text_files)


def problem_fields(job: Job, protocol: str) -> dict:
    """What every line of a problem carries, an error line too: the facts scoring and re-scoring need, and
    the protocol whose prompts the models read (its rules score the line)."""
    problem = job.payload
    return {
        "benchmark": "mathvista",
        "protocol": protocol,
        "scored_by": protocol,
        "task": task_of(problem),
        "query": problem.query,
        **problem.facts(),
    }


def result_record(
    res,
    both: dict[str, dict],
    protocol: str,
    save_trace: bool = False,
    elapsed_s: float | None = None,
    batch: int = 1,
) -> dict:
    """The outcome fields of one problem and method (the runner adds id, method and problem_fields): the
    response, both protocols' verdicts (`both`, headline: `protocol`'s), finish reason and statistics.
    elapsed_s: this request's share of its batch's decoding time (the batch's own time at batch 1)."""
    stats = res.stats.to_dict()
    if elapsed_s is not None:
        stats["elapsed_s"] = elapsed_s
    rec = {
        "response": res.text,
        **headline(both, protocol),
        "finish_reason": res.finish_reason,
        "batch": batch,
        "stats": stats,
    }
    if save_trace:
        rec["trace"] = [[t.token_id, t.source] for t in res.trace]
    return rec


def decode_group(
    vl, setup: Setup, cfg, extractor, group: list[Job], save_trace: bool = False
) -> list[dict]:
    """Records of one batch of problems for one method: build the requests (images only for the methods that
    read them), decode them together, extract and score each answer under both protocols."""
    method = group[0].method
    requests = [
        build_request(
            j.payload,
            method,
            setup.store.get(j.payload) if method in IMAGE_METHODS else None,
            setup.captioner,
            setup.protocol,
        )
        for j in group
    ]
    results = vl.generate_batch(requests, method, cfg)
    records = []
    for job, res, share in zip(group, results, elapsed_shares(results)):
        if failed(res):
            records.append(failed(res))
            continue
        both = verdicts(res.text, job.payload.facts(), job.payload.query, extractor)
        records.append(
            result_record(res, both, setup.protocol.name, save_trace, share, len(group))
        )
    return records


def table(
    records: list[dict], methods: list[str], tasks: tuple[str, ...]
) -> tuple[list[dict], list[str]]:
    """Rows in Table 3's layout: per-task accuracy, Overall, n, errors, tokens/s, acceptance, MAL."""
    groups = {t: (lambda r, t=t: r.get("task") == t) for t in tasks}
    rows = summarize(records, groups, methods, METHOD_NAMES)
    return rows, ["method", *tasks, "Overall", "n", "errors", *SPEED_COLUMNS]


def write_outputs(
    out: Path,
    records: list[dict],
    methods: list[str],
    tasks: tuple[str, ...],
    heading: str = "MathVista",
) -> tuple[str, dict]:
    """Table (md, csv, json; its title names the protocols that made it), charts and breakdown.json; returns
    the Markdown table and the paths."""
    rows, columns = table(records, methods, tasks)
    paths = write_summary(
        rows,
        columns,
        out,
        "table",
        f"{heading} ({label(records)})",
        [*tasks, "Overall"],
    )
    per_method = {
        METHOD_NAMES.get(m, m): breakdown([r for r in records if r["method"] == m])
        for m in methods
    }
    paths["breakdown"] = out / "breakdown.json"
    paths["breakdown"].write_text(json.dumps(per_method, indent=2))
    return paths["md"].read_text(), paths


def fingerprint(args, cfg, protocol: EvalProtocol, setup: Setup) -> dict:
    """The settings that make results comparable: a resume must match them (methods and --limit may grow)."""
    return {
        "benchmark": "mathvista",
        "drafter": args.drafter,
        "verifier": args.verifier,
        "text_drafter": args.text_drafter,
        "backend": args.backend,
        "dtype": args.dtype,
        "config": cfg.to_dict(),
        "protocol": protocol.to_dict(),
        "extract": args.extract,
        "texts": {k: sha256_file(p) for k, p in setup.text_files.items()},
    }


def run_eval(args, cfg, protocol: EvalProtocol) -> int:

    out = writable_folder(args.out)  # before anything is loaded or computed
    setup = load_setup(
        args.images,
        protocol,
        args.limit,
        args.pids,
        args.captions,
        args.ocrs,
        needs_images=any(m in IMAGE_METHODS for m in args.methods),
    )
    log = ResultsLog(out / RESULTS, fingerprint(args, cfg, protocol, setup))
    log.check_writable()  # before the models load: a result that cannot be kept is never computed
    # method by method, grouped by engine: on a GPU, where one vLLM engine fits at a time, each starts once
    jobs = [
        Job(p.pid, m, p) for m in engine_order(args.methods) for p in setup.problems
    ]
    done = log.done_keys()
    note = resume_note(jobs, done, out / RESULTS)
    if note:
        print(note, file=sys.stderr)
    vl = extractor = None
    if any(
        j.key not in done for j in jobs
    ):  # models load only when something is left to do
        vl = commands.load_from_args(args)  # read at call time (tests stand in for it)
        # a cross-family verifier whose answers' numbers lie outside the shared set: said once, here
        warn_numbers(vl.pair, setup.problems)
        extractor = _extractor(args, vl)
    work = BatchedWork(
        jobs,
        done,
        args.batch,
        lambda group: decode_group(vl, setup, cfg, extractor, group, args.save_trace),
    )
    label = f"mathvista: {len(setup.problems)} problems × {len(args.methods)} methods"
    records = run_jobs(
        jobs,
        work,
        log,
        desc=label,
        progress=not args.no_progress,
        base=lambda job: problem_fields(job, protocol.name),
    )
    markdown, paths = write_outputs(out, records, args.methods, protocol.tasks)
    models = (
        dict(vl.names)
        if vl
        else {
            "drafter": args.drafter,
            "verifier": args.verifier,
            "text_drafter": args.text_drafter,
            "backend": args.backend,
        }
    )
    data = {
        **{p.name: sha256_file(p) for p in data_files().values()},
        **{f"{k} (used)": sha256_file(p) for k, p in setup.text_files.items()},
        "images": setup.store.describe(setup.problems)
        if setup.store is not None
        else None,
    }
    write_manifest(
        out / "manifest.json",
        build_manifest(
            "mathvista",
            models,
            cfg.to_dict(),
            data,
            {
                "protocol": protocol.to_dict(),
                "methods": args.methods,
                "extract": args.extract,
                "n_problems": len(setup.problems),
                "pids": [p.pid for p in setup.problems],
                "dtype": args.dtype,
                "device": args.device,
                "batch": args.batch,
            },
        ),
    )
    print(markdown)
    print(
        f"results: {out / RESULTS}\ntable: {paths['md']}, {paths['csv']}, {paths['json']}\n"
        f"charts: {paths['png']}\nmanifest: {out / 'manifest.json'}"
    )
    return 0


def _extractor(args, vl):
    if args.extract == "llm":
        return LLMExtractor.from_pipeline(vl)

    return RuleExtractor()
