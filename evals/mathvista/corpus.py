"""MathVista's text as a corpus of the verifier's words (queries, answers, captions: the files the eval reads), and the
warning a cross-family pair gets when its verifier writes MathVista's answers outside the shared set."""

from __future__ import annotations

import sys

from asymspec_vl.inputs.vocab_report import numbers_warning, verifier_words

from .data import data_files, load_problems, read_json

NAME = "MathVista testmini"


def texts(
    problems=None, captions: dict[str, str] | None = None
) -> dict[str, list[str]]:
    """{"queries", "answers", "captions"} -> texts of `problems` (default: every testmini problem of the vendored
    data, as `eval mathvista` reads it) and `captions` (pid -> caption; default: the vendored Bard captions)."""
    if problems is None:
        problems = list(load_problems().values())
    if captions is None:
        captions = read_json(data_files()["captions"])["texts"]
    return {
        "queries": [p.query for p in problems],
        "answers": [p.answer for p in problems],
        "captions": [captions[p.pid] for p in problems if captions.get(p.pid)],
    }


def warn_numbers(pair, problems) -> str | None:
    """Once per load of a cross-family pair (`pair`: a ModelPair): print on stderr, and return, numbers_warning of
    the selected problems' answers; None for one vocabulary or below the threshold."""
    if pair.vmap.identity:
        return None
    answers = [p.answer for p in problems]
    note = numbers_warning(verifier_words(pair.vmap, pair.tokenizer, answers), NAME)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    return note
