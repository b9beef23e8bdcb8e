"""MathVista's official scoring, reimplemented from its rules: normalize the extraction, compare as strings.

normalize_extraction(extraction, choices, question_type, answer_type, precision):
    multi_choice: the extraction as a stripped string (a non-string goes through str(), so None -> "None");
        if it contains "(x)" for a letter x, take the first such letter, upper-cased; a letter A, B, ...
        within the number of choices becomes that choice's text; anything else becomes the choice with the
        smallest Levenshtein distance to it (the first on ties). So an empty extraction becomes the
        shortest choice, and with duplicate choices a letter picks its own position.
    integer: str(int(float(x))) ("5.0" -> "5"); if that fails: None (wrong).
    float:   str(round(float(x), precision)) ("1.25" at precision 1 -> "1.2", Python's rounding of the
        binary float); if that fails: None.
    list:    str(x) unchanged.
    anything else: unchanged.
correct iff prediction == answer (the answer string of testmini.json). The official script has no further
rules; errors during normalization mean "wrong", never a crash.
"""

from __future__ import annotations

import re

BREAKDOWN_KEYS = (
    "question_type",
    "answer_type",
    "language",
    "source",
    "category",
    "task",
    "context",
    "grade",
    "skills",
)


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character, each costing 1)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(
        range(len(b) + 1)
    )  # [len(b) + 1]: distances from a[:i] to every prefix of b
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def most_similar(prediction: str, choices: list[str]) -> str:
    """The choice nearest to `prediction` in edit distance; the first one on ties."""
    distances = [levenshtein(prediction, c) for c in choices]
    return choices[distances.index(min(distances))]


def normalize_extraction(
    extraction,
    choices: list[str] | None,
    question_type: str,
    answer_type: str,
    precision: int | None,
):
    """The official normalization (rules in the module docstring); returns a string, or None (wrong)."""
    if question_type == "multi_choice":
        text = extraction.strip() if isinstance(extraction, str) else str(extraction)
        if not choices:
            return None
        letters = re.findall(r"\(([a-zA-Z])\)", text)
        if letters:
            text = letters[0].upper()
        options = [chr(ord("A") + i) for i in range(len(choices))]
        if text in options:
            return choices[options.index(text)]
        return most_similar(text, choices)
    try:
        if answer_type == "integer":
            return str(int(float(extraction)))
        if answer_type == "float":
            return str(
                round(float(extraction), None if precision is None else int(precision))
            )
        if answer_type == "list":
            return str(extraction)
    except (TypeError, ValueError, OverflowError):
        return None
    return extraction


def score(extraction, facts: dict) -> tuple[str | None, bool]:
    """(prediction, correct) of one extraction against a problem's facts (Problem.facts())."""
    prediction = normalize_extraction(
        extraction,
        facts.get("choices"),
        facts["question_type"],
        facts["answer_type"],
        facts.get("precision"),
    )
    return prediction, prediction is not None and prediction == facts["answer"]


def breakdown(records: list[dict]) -> dict:
    """Accuracy per value of each official breakdown key (skills are multi-label), as the official
    scores file lays it out: {"average": {...}, key: {value: {"accuracy", "correct", "total"}}}."""

    def cell(rs: list[dict]) -> dict:
        correct = sum(1 for r in rs if r.get("correct") is True)
        return {
            "accuracy": correct / len(rs) if rs else 0.0,
            "correct": correct,
            "total": len(rs),
        }

    def field(r: dict, key: str):
        return (
            r.get(key)
            if key in ("question_type", "answer_type")
            else (r.get("metadata") or {}).get(key)
        )

    out = {"average": cell(records)}
    for key in BREAKDOWN_KEYS:
        groups: dict[str, list[dict]] = {}
        for r in records:
            values = field(r, key)
            for v in values if isinstance(values, list) else [values]:
                groups.setdefault(str(v), []).append(r)
        cells = {v: cell(rs) for v, rs in groups.items()}
        out[key] = dict(sorted(cells.items(), key=lambda kv: -kv[1]["accuracy"]))
    return out
