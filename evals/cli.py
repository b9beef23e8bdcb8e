"""`asymspec-vl eval ...`: one sub-subcommand per eval module (EVAL_MODULES), and `eval score` to re-score
saved results.

To add an eval (e.g. `eval toy`), write a module with register(eval_subparsers) and list it here. To take
part in `eval score`, the module also defines BENCHMARK (the "benchmark" field of its result records),
add_score_args(parser) (options must not clash with other modules') and
rescore(records, args, methods, out, sources) -> the Markdown table (writing outputs under `out` if given),
and may define check_record(record) -> what makes a saved record unusable, or None (the file is named in
the error).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from asymspec_vl.core.errors import InputError

from .jobs import ResultsFileError, read_records, writable_folder

EVAL_MODULES = [
    "asymspec_vl.evals.mathvista.cli",
    "asymspec_vl.evals.toy.cli",
]


def register(sub) -> None:
    p = sub.add_parser(
        "eval", help="run an evaluation (MathVista, ...) or re-score saved results"
    )
    esub = p.add_subparsers(dest="eval_command", required=True, metavar="EVAL")
    modules = [importlib.import_module(name) for name in EVAL_MODULES]
    for module in modules:
        module.register(esub)
    s = esub.add_parser(
        "score", help="re-score saved results (JSONL): re-extract answers, compare runs"
    )
    s.add_argument(
        "results",
        nargs="+",
        help="results.jsonl file(s); with several, rows are labelled <folder>/<method>",
    )
    s.add_argument(
        "--out", default=None, help="write the re-scored JSONL, table and charts here"
    )
    for module in modules:
        if hasattr(module, "add_score_args"):
            module.add_score_args(s)
    s.set_defaults(func=lambda args: _score(args, modules))


def _labels(paths: list[Path]) -> list[str]:
    names = [p.parent.name or p.stem for p in paths]
    return names if len(set(names)) == len(names) else [str(p.parent) for p in paths]


def _score(args, modules) -> int:

    if args.out is not None:
        writable_folder(args.out)  # before any re-extraction runs
    scorers = {
        getattr(m, "BENCHMARK", None): m for m in modules if hasattr(m, "rescore")
    }
    paths = [Path(x) for x in args.results]
    records = []
    for path, label in zip(paths, _labels(paths)):
        for rec in read_records(path):
            problem = _record_problem(rec, scorers)
            if problem:
                raise ResultsFileError(
                    f"{path}: the record of id {rec.get('id')!r}, method {rec.get('method')!r} "
                    f"{problem}: fix or remove that line"
                )
            records.append(
                {**rec, "method": f"{label}/{rec['method']}"} if len(paths) > 1 else rec
            )
    if not records:
        raise InputError(f"no result records in {', '.join(map(str, paths))}")
    benchmarks = list(dict.fromkeys(r.get("benchmark") for r in records))
    unknown = [b for b in benchmarks if b not in scorers]
    if unknown:
        raise InputError(
            f"no scorer for benchmark(s) {unknown}; known: {sorted(k for k in scorers if k)}"
        )
    for bench in benchmarks:
        mine = [r for r in records if r.get("benchmark") == bench]
        methods = _run_order(list(dict.fromkeys(r["method"] for r in mine)), paths)
        out = (
            None
            if args.out is None
            else Path(args.out) / (bench if len(benchmarks) > 1 else "")
        )
        print(scorers[bench].rescore(mine, args, methods, out, paths))
    return 0


def _run_order(methods: list[str], paths: list[Path]) -> list[str]:
    """The methods in the order the run listed them (its manifest.json), when one run is re-scored: results
    are written engine by engine, not in that order."""

    manifest = paths[0].parent / "manifest.json"
    if len(paths) != 1 or not manifest.is_file():
        return methods
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8")).get("methods") or []
    except (ValueError, AttributeError):
        return methods
    listed = [m for m in listed if m in methods] if isinstance(listed, list) else []
    return listed + [m for m in methods if m not in listed]


def _record_problem(rec: dict, scorers: dict) -> str | None:
    """What makes a saved record unusable (None: nothing) beyond what read_records refuses (records.problem):
    what its eval's check_record says."""
    check = getattr(scorers.get(rec.get("benchmark")), "check_record", None)
    return check(rec) if check else None
