"""`asymspec-vl eval toy`: the toy world's Table-3-style table on the held-out set, and its part of
`asymspec-vl eval score` (re-extract the final numbers of saved responses)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from asymspec_vl import commands
from asymspec_vl.commands import (
    add_model_args,
    add_threads_arg,
    comma_list,
)
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.inputs.vocab_report import describe_words, verifier_words
from asymspec_vl.timing import set_threads
from asymspec_vl.toy import world

from ..jobs import ResultsLog
from ..manifest import build_manifest, write_manifest
from ..report import markdown_table
from .eval import BASE, BENCHMARK, VARIANTS, evaluate, table, variants, write_outputs

DEFAULT_N = 300


def _keys(text: str) -> list[str]:

    return comma_list(text, list(VARIANTS), "variant")


def register(esub) -> None:

    p = esub.add_parser(
        "toy",
        help="the toy world (embedded pair): drafter alone, Floor, SD, SCD, AsymSpec",
    )
    p.add_argument(
        "--n",
        type=int,
        default=DEFAULT_N,
        help="held-out questions (read / sum / mult in turn)",
    )
    p.add_argument(
        "--variants",
        type=_keys,
        default=",".join(v.key for v in variants()),
        help="comma list of table rows",
    )
    p.add_argument(
        "--out",
        default="runs/toy",
        help="output folder (rerun the same command to resume)",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=50,
        help="requests decoded together (1: one at a time)",
    )
    add_threads_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p, drafter="embedded", verifier="embedded")
    p.set_defaults(func=_run)


def _run(args) -> int:

    if args.n < 1 or args.batch < 1:
        raise ConfigError(
            f"--n={args.n}, --batch={args.batch}: expected n >= 1, batch >= 1"
        )
    set_threads(args.threads, args.device)
    out = Path(args.out)
    vl = commands.load_from_args(args)  # read at call time (tests stand in for it)
    examples = world.heldout(args.n)
    fingerprint = {
        "benchmark": BENCHMARK,
        "models": {k: v for k, v in vl.names.items()},
        "weights": _weights(vl.names),
        "dtype": args.dtype,
        "base": BASE.to_dict(),
        "variants": {k: v.changes | {"method": v.method} for k, v in VARIANTS.items()},
    }
    log = ResultsLog(out / "results.jsonl", fingerprint)
    log.check_writable()  # before the first request: a result that cannot be kept is never computed
    records = evaluate(
        vl,
        examples,
        args.variants,
        log,
        args.batch,
        progress=not args.no_progress,
        warm=True,
    )
    markdown, paths = write_outputs(
        out, records, args.variants, title(vl, args.n, args.batch)
    )
    write_manifest(
        out / "manifest.json",
        build_manifest(
            BENCHMARK,
            dict(vl.names),
            BASE.to_dict(),
            {"heldout": f"world.heldout({args.n})"},
            {
                "variants": args.variants,
                "weights": fingerprint["weights"],
                "batch": args.batch,
                "threads": args.threads,
            },
        ),
    )
    print(markdown)
    words = words_line(vl, examples)
    if words:
        print(words)
    print(
        "tokens/s: one pass, timed on this machine as it was loaded then; it swings up to 2.5x from run to run "
        "on a shared CPU, so compare methods within one table (docs/benchmarks.md: warmed, repeated timings)"
    )
    print(
        f"results: {out / 'results.jsonl'}\ntable: {paths['md']}, {paths['csv']}, {paths['json']}\n"
        f"charts: {paths['png']}\nmanifest: {out / 'manifest.json'}"
    )
    return 0


def title(vl, n: int, batch: int) -> str:
    """The table's header; a cross-family pair's names its vocabulary map (shared-set size, share of each)."""
    head = f"Toy world, held-out n={n} ({vl.names['backend']}, batch {batch})"
    vmap = vl.pair.vmap
    if vmap.identity:
        return head
    sd, sv = vmap.share()
    return (
        f"{head}; cross-family: {vmap.size} shared tokens ({sd:.1%} of the drafter's {vmap.drafter_size}, "
        f"{sv:.1%} of the verifier's {vmap.verifier_size})"
    )


def words_line(vl, examples) -> str | None:
    """A cross-family pair's line on the verifier's own words: the share of its tokens, on the held-out answers,
    outside the shared set (inputs/vocab_report.py); None for one vocabulary."""
    if vl.pair.vmap.identity:
        return None
    answers = [e.answer for e in examples]
    report = verifier_words(vl.pair.vmap, vl.pair.tokenizer, answers, top=3)
    return "cross-family: " + describe_words(report, "the held-out answers")


def _weights(names: dict) -> dict:
    """sha256 of the drafter's and verifier's weight files (local folders), so a resume matches the models."""

    out = {}
    for role in ("drafter", "verifier"):
        folder = Path(str(names.get(role)))
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        out[role] = {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files
        } or None
    return out


def rescore(
    records: list[dict], args, methods: list[str], out: Path | None, sources: list[Path]
) -> str:
    """Re-extract the final number of every saved response and re-score; returns the Markdown table
    (with `out`: also rescored.jsonl, the table files and the charts there)."""

    fresh = []
    for r in records:
        prediction = world.extract_answer(r.get("response") or "")
        fresh.append(
            {**r, "prediction": prediction, "correct": prediction == r.get("target")}
        )
    if out is None:
        return markdown_table(*table(fresh, methods))
    (out / "rescored.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (out / "rescored.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fresh))
    return write_outputs(out, fresh, methods)[0]
