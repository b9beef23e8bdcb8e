"""`asymspec-vl vocab-report`: for a pair and a corpus (default: MathVista's text), the share of the verifier's tokens
outside the shared set, the most frequent of them and the share that are numbers (inputs/vocab_report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from asymspec_vl.commands import positive_int
from asymspec_vl.core.errors import InputError
from asymspec_vl.inputs.vocab_report import (
    describe_words,
    numbers_warning,
    verifier_words,
)
from asymspec_vl.pair.defaults import EMBEDDED, Weights, resolve

from .mathvista import corpus as mathvista_corpus


def register(sub) -> None:
    p = sub.add_parser(
        "vocab-report",
        help="a cross-family pair's verifier tokens outside the shared set, on a corpus",
        description="Tokenize a corpus with the verifier's tokenizer and report the share of its\n"
        "tokens outside the pair's shared set (tokens the pair never commits: it spells\n"
        "them in shared pieces), the most frequent of them and the share that are\n"
        "numbers. Reads the tokenizers and configs only, no weights.",
    )
    g = p.add_argument_group("models")
    g.add_argument(
        "--drafter",
        default=None,
        help="VL drafter: hub id, local path or 'embedded' (default: embedded)",
    )
    g.add_argument(
        "--verifier",
        default=None,
        help="verifier: hub id, local path, 'embedded' or 'embedded-llama' (default: embedded)",
    )
    g.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model repos to run their own code",
    )
    p.set_defaults(pair_defaults=(EMBEDDED, EMBEDDED))
    p.add_argument(
        "--corpus",
        default=None,
        help="a text file (one text per non-empty line) or JSON lines (.jsonl: a string or an object per "
        "line) (default: MathVista testmini's queries, answers and captions, as `eval mathvista` reads them)",
    )
    p.add_argument(
        "--field",
        default="text",
        help="the field holding the text in a .jsonl corpus of objects",
    )
    p.add_argument(
        "--top",
        type=positive_int,
        default=20,
        help="how many of the most frequent outside tokens to list",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def read_corpus(path: str | Path, field: str = "text") -> list[str]:
    """Texts of a corpus file: JSON lines (.jsonl: a string, or an object whose `field` is one, per line) or plain
    text (one text per non-empty line). A file that is neither is an InputError naming the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"--corpus {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(
            f"--corpus {path}: cannot be read as UTF-8 text ({e})"
        ) from None
    if path.suffix != ".jsonl":
        return [line for line in lines if line.strip()]
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"--corpus {path}, line {n}: not JSON ({e})") from None
        if isinstance(item, dict):
            item = item.get(field)
        if not isinstance(item, str):
            raise InputError(
                f"--corpus {path}, line {n}: expected a string or an object whose {field!r} is a string "
                f"(--field names it), got {line[:60]!r}"
            )
        out.append(item)
    return out


def _run(args) -> int:
    from asymspec_vl.inputs.vocab_map import describe  # lazy: loads torch
    from asymspec_vl.pair.model_pair import ModelPair  # lazy: loads torch

    if args.corpus is None:
        name, parts = f"{mathvista_corpus.NAME}'s text", mathvista_corpus.texts()
    else:
        name, parts = args.corpus, {"texts": read_corpus(args.corpus, args.field)}
    drafter = resolve("drafter", args.drafter, Weights.RANDOM)
    verifier = resolve("verifier", args.verifier, Weights.RANDOM)
    # the report reads the two vocabularies only: a text-only drafter of the same tokenizer will do
    pair = ModelPair.load(
        drafter, verifier, trust_remote_code=args.trust_remote_code, images=False
    )
    every = [t for texts in parts.values() for t in texts]
    report = verifier_words(pair.vmap, pair.tokenizer, every, args.top)
    by_part = (
        {
            k: verifier_words(pair.vmap, pair.tokenizer, v, args.top)
            for k, v in parts.items()
        }
        if len(parts) > 1
        else {}
    )
    note = (
        numbers_warning(by_part["answers"], mathvista_corpus.NAME)
        if "answers" in by_part
        else None
    )
    if args.json:
        print(
            json.dumps(
                {
                    "drafter": args.drafter,
                    "verifier": args.verifier,
                    "map": describe(pair.vmap),
                    "corpus": name,
                    "report": report.to_dict(),
                    "parts": {k: r.to_dict() for k, r in by_part.items()},
                    "warning": note,
                }
            )
        )
        return 0
    print(f"pair: {args.drafter} -> {args.verifier}\nmap: {describe(pair.vmap)}")
    print(describe_words(report, name))
    for part, r in by_part.items():
        print(
            f"  {part}: {r.texts:,} texts, {r.outside_share:.2%} of {r.tokens:,} tokens outside "
            f"({r.number_share:.0%} numbers); {r.texts_with_outside_number:,} texts "
            f"({r.texts_number_share:.1%}) hold a number outside"
        )
    if report.top:
        print(f"the {len(report.top)} most frequent outside the shared set:")
        print(f"  {'token':>14} {'id':>7} {'count':>7} {'share':>7}  number")
        for t in report.top:
            line = f"  {t.text!r:>14} {t.token_id:>7} {t.count:>7} {t.share:>7.2%}  "
            print(line + "yes" if t.number else line.rstrip())
    if note:
        print(f"warning: {note}")
    return 0
