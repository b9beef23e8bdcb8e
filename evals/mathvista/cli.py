"""`asymspec-vl eval mathvista ...` and MathVista's part of `asymspec-vl eval score` (re-extract, re-score)."""

from __future__ import annotations

import json
from pathlib import Path

from asymspec_vl.commands import (
    add_config_args,
    add_model_args,
    add_threads_arg,
    comma_list,
    config_from_args,
    parse_methods,
    positive_int,
)
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.timing import set_threads

from ..report import markdown_table
from .extraction import RuleExtractor
from .protocol import (
    COT_SUFFIX,
    PAPER_DECODING,
    PAPER_TASKS,
    PROTOCOLS,
    TASKS,
    EvalProtocol,
    parse_tasks,
)
from .verdicts import DEFAULT, headline, kept, label, verdicts

BENCHMARK = "mathvista"
DEFAULT_METHODS = "floor,sd,drafter,asymspec"


def register(esub) -> None:

    p = esub.add_parser(
        "mathvista", help="MathVista testmini (the paper's Table 3 protocol by default)"
    )
    p.add_argument(
        "--methods",
        type=parse_methods,
        default=parse_methods(DEFAULT_METHODS),
        help="comma list of floor, sd, drafter, asymspec, scd",
    )
    p.add_argument(
        "--out",
        default="runs/mathvista",
        help="output folder (rerun the same command to resume)",
    )
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="official",
        help="prompts and headline scoring: official (MathVista's rules, comparable with its "
        "leaderboard) or release (the authors' released harness, comparable with the paper's "
        "Table 3); every result line keeps both protocols' verdicts",
    )
    p.add_argument(
        "--images",
        default=None,
        help="a folder of testmini images (or of a parquet copy of the split), or 'hub'; default: "
        "~/.cache/asymspec-vl/mathvista if it exists, else the hub",
    )
    p.add_argument(
        "--tasks",
        default="GPS,VQA,FQA",
        help="comma list of GPS, VQA, FQA, MWP, TQA, or 'all'",
    )
    p.add_argument(
        "--all-problems",
        action="store_true",
        help="keep problems without a Bard caption too (with --tasks all: the full testmini, 1,000)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="the first N selected problems (pid order)",
    )
    p.add_argument(
        "--pids",
        type=comma_list,
        default=None,
        help="comma list of pids to run (within the selection)",
    )
    p.add_argument(
        "--extract",
        choices=("rule", "llm"),
        default="rule",
        help="answer extraction: rules, or MathVista's LLM prompt on the verifier",
    )
    p.add_argument(
        "--captions",
        default=None,
        help="captions JSON (default: the official Bard captions)",
    )
    p.add_argument(
        "--ocrs", default=None, help="OCR JSON (default: the official EasyOCR texts)"
    )
    p.add_argument(
        "--caption-chars",
        type=int,
        default=1600,
        help="the verifier's caption is cut to this",
    )
    p.add_argument(
        "--ocr-chars",
        type=int,
        default=800,
        help="the verifier's OCR text is cut to this",
    )
    p.add_argument(
        "--cot-suffix",
        default=COT_SUFFIX,
        help="appended to the official query on a new line",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=1,
        help="problems decoded together per method (1: one at a time, as the paper measures tokens/s; "
        "larger: faster runs, tokens/s is then the batch's throughput)",
    )
    p.add_argument(
        "--save-trace",
        action="store_true",
        help="store each token's id and source in the JSONL",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_threads_arg(p)
    add_model_args(p)
    add_config_args(p, **PAPER_DECODING)
    p.set_defaults(func=_run)


def _run(args) -> int:

    from .run import run_eval  # lazy: loads torch

    protocol = EvalProtocol(
        name=args.protocol,
        tasks=parse_tasks(args.tasks),
        require_caption=not args.all_problems,
        caption_chars=args.caption_chars,
        ocr_chars=args.ocr_chars,
        cot_suffix=args.cot_suffix,
    )
    cfg = config_from_args(args)
    set_threads(args.threads, args.device)
    return run_eval(args, cfg, protocol)


def add_score_args(p) -> None:

    g = p.add_argument_group("mathvista")
    g.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=None,
        help="report the verdicts of these rules (default: of the protocol each run used); both "
        "protocols' verdicts are recomputed and stored either way",
    )
    g.add_argument(
        "--extract",
        choices=("keep", "rule", "llm"),
        default="rule",
        help="the official verdict: keep the stored extractions (re-normalize only), or extract "
        "again by rules / LLM (the release's verdict always uses its own rules)",
    )
    g.add_argument(
        "--verifier",
        default=None,
        help="--extract llm: the extraction model (default: the verifier in the run's manifest.json)",
    )
    g.add_argument(
        "--device",
        default=None,
        help="--extract llm: cpu, cuda, cuda:1 ... (default: cuda if available, else cpu)",
    )
    g.add_argument(
        "--dtype",
        default="auto",
        help="--extract llm: auto (bf16 on GPU, fp32 on CPU), float32, ...",
    )


def rescore(
    records: list[dict], args, methods: list[str], out: Path | None, sources: list[Path]
) -> str:
    """Re-extract (per --extract) and re-score `records` under both protocols, headline per --protocol;
    returns the Markdown table; with `out`, writes rescored.jsonl, the table, charts and breakdown there."""

    from .run import table, write_outputs  # lazy: loads torch

    extractor = _score_extractor(args, sources)
    fresh = []
    for rec in records:
        rec = dict(rec)
        protocol = args.protocol or rec.get("protocol") or DEFAULT
        if not rec.get("error") and "response" in rec:
            both = (
                kept(rec)
                if extractor is None
                else verdicts(
                    rec["response"], rec, rec.get("query") or rec["question"], extractor
                )
            )
            rec.update(headline(both, protocol))
        else:
            rec["scored_by"] = protocol
        fresh.append(rec)
    present = {r.get("task") for r in fresh}
    tasks = tuple(
        t for t in TASKS if t in PAPER_TASKS or t in present
    )  # Table 3's columns, plus any other
    if out is None:
        return f"MathVista, re-scored ({label(fresh)})\n\n" + markdown_table(
            *table(fresh, methods, tasks)
        )
    out.mkdir(parents=True, exist_ok=True)
    with (out / "rescored.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(rec) + "\n" for rec in fresh)
    return write_outputs(out, fresh, methods, tasks, "MathVista, re-scored")[0]


def check_record(rec: dict) -> str | None:
    """What makes a saved MathVista record unusable for re-scoring (a field of the wrong type), or None."""
    for key in (
        "response",
        "question",
        "query",
        "answer",
        "question_type",
        "answer_type",
        "extraction",
    ):
        if (
            key in rec
            and not isinstance(rec[key], str)
            and not (key == "query" and rec[key] is None)
        ):
            return f"has {key}={str(rec[key])[:40]} ({type(rec[key]).__name__}); expected text"
    missing = [
        k
        for k in ("question", "answer", "question_type", "answer_type")
        if k not in rec
    ]
    if missing:
        return f"lacks {', '.join(missing)}"
    stored = rec.get("verdicts", {})
    if not isinstance(stored, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("extraction"), str)
        and isinstance(v.get("extractor", ""), str)
        for v in stored.values()
    ):
        return f"has verdicts={str(stored)[:40]}; expected {{protocol: {{extraction: text, ...}}}}"
    choices = rec.get("choices")
    if choices is not None and not (
        isinstance(choices, list) and all(isinstance(c, str) for c in choices)
    ):
        return f"has choices={str(choices)[:40]}; expected a list of texts or null"
    precision = rec.get("precision")
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, (int, float))
    ):
        return f"has precision={str(precision)[:40]}; expected a number or null"
    return None


def _score_extractor(args, sources: list[Path]):
    if args.extract == "keep":
        return None
    if args.extract == "rule":
        return RuleExtractor()

    from .llm_extract import LLMExtractor  # lazy: loads torch

    verifier = args.verifier or _manifest_verifier(sources)
    if not verifier:
        raise ConfigError(
            "--extract llm needs --verifier (no manifest.json beside the results names one)"
        )
    return LLMExtractor.from_pretrained(verifier, device=args.device, dtype=args.dtype)


def _manifest_verifier(sources: list[Path]) -> str | None:

    for src in sources:
        path = Path(src).parent / "manifest.json"
        if path.is_file():
            return json.loads(path.read_text()).get("models", {}).get("verifier")
    return None
