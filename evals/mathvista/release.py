"""The authors' released MathVista harness as a protocol of its own ("release", beside "official"): the
verifier's text, the OCR join, answer extraction and scoring that produced the paper's Table 3.

Rules (from the release's scripts/bench_mathvista.py in USTC-StarTeam/AsymSpec, restated here):
  verifier text  "Image caption: <caption>", then "OCR text from image: <ocr>" only when the OCR text is not
                 blank, then "<query>\\n<chain-of-thought suffix>", joined by blank lines. Neither caption nor
                 OCR text is stripped; the caption is cut to 1,600 characters, the OCR text to 800.
  OCR text       the texts of the EasyOCR entries in their stored order, joined by single spaces.
  anchor         (of the stripped response) the content of the last \\boxed{...} that holds no braces; else
                 what follows the first "final answer" (an optional ":" or "-", up to two "*" and the
                 rest of that line up to a "*"; a trailing "." removed); else the first line that ends in
                 "answer is X" or "answer: X" (X without "*", up to two "*" around it); else the last
                 non-empty line.
  multi_choice   the first standalone capital A-F of the anchor; else the letter of the first choice whose
                 normalised text begins the normalised anchor; else the last standalone A-F of the whole
                 response; else the anchor's first 20 characters.
  free_form      the last number (-?digits[.digits]) of the anchor, else of the response's last line, else of
                 the response, printed as an integer when whole and with "%g" otherwise; else the anchor's
                 first 30 characters.
  normalise      lower-case, strip, drop trailing "." and "°" characters, delete all whitespace.
  correct        multi_choice whose gold answer is one of the choices: the extraction, upper-cased, is the
                 gold choice's letter; otherwise: normalised extraction == normalised gold answer (so
                 "1.23" against a gold "1.2" is wrong, unlike the official rules). No LLM extraction.
"""

from __future__ import annotations

import re

from asymspec_vl.captioners.reading import parse_easyocr

NAME = "release"
EXTRACTOR = "release-rules"

_BOXED = re.compile(r"\\boxed\{([^{}]+)\}")
_FINAL = re.compile(r"final\s*answer\s*[:\-]?\s*\*{0,2}([^\n*]+)", re.IGNORECASE)
_ANSWER_IS = re.compile(
    r"answer\s*(?:is|:)\s*\*{0,2}([^\n*]+?)\*{0,2}\s*$", re.IGNORECASE | re.MULTILINE
)
_LETTER = re.compile(r"\b([A-F])\b")
_NUMBER = re.compile(r"-?\d+\.?\d*")


def ocr_join(raw) -> str:
    """An EasyOCR result (a list of (box, text, confidence) or its Python-literal string) -> the texts in
    stored order joined by single spaces; plain OCR text is kept as it is."""
    if isinstance(raw, str) and not raw.lstrip().startswith("["):
        return raw
    return " ".join(box.text for box in parse_easyocr(raw, "the OCR result"))


def user_text(caption: str, ocr: str, question: str) -> str:
    """The verifier's user message (the drafter reads the same text after the image)."""
    parts = [f"Image caption: {caption}"]
    if ocr.strip():
        parts.append(f"OCR text from image: {ocr}")
    parts.append(question)
    return "\n\n".join(parts)


def anchor(response: str) -> str:
    """The part of a (stripped) response that states the answer (rules in the module docstring)."""
    boxed = _BOXED.findall(response)
    if boxed:
        return boxed[-1]
    for pattern in (_FINAL, _ANSWER_IS):
        found = pattern.search(response)
        if found:
            return found.group(1).strip().rstrip(".")
    lines = [line.strip() for line in response.splitlines() if line.strip()]
    return lines[-1] if lines else response


def normalise(text) -> str:
    return re.sub(r"\s+", "", str(text).lower().strip().rstrip(".°"))


def _letter(i: int) -> str:
    return chr(ord("A") + i)


def extract(response: str, facts: dict) -> str:
    """The release's answer to compare with the gold one: a letter (or text) for multi_choice, a number
    (or text) for free_form."""
    text = response.strip()
    span = anchor(text)
    if facts["question_type"] == "multi_choice":
        letter = _LETTER.search(span)
        if letter:
            return letter.group(1)
        for i, choice in enumerate(facts.get("choices") or []):
            if normalise(span).startswith(normalise(choice)):
                return _letter(i)
        letters = _LETTER.findall(text)
        return letters[-1] if letters else span[:20]
    numbers = (
        _NUMBER.findall(span)
        or _NUMBER.findall(text.split("\n")[-1])
        or _NUMBER.findall(text)
    )
    if not numbers:
        return span[:30]
    value = float(numbers[-1])
    return str(int(value)) if value.is_integer() else f"{value:g}"


def score(extraction: str, facts: dict) -> tuple[str, bool]:
    """(what was compared with the gold answer, correct) under the release's rules."""
    choices, gold = facts.get("choices") or [], facts["answer"]
    if facts["question_type"] == "multi_choice" and gold in choices:
        prediction = str(extraction).upper()
        return prediction, prediction == _letter(choices.index(gold))
    prediction = normalise(extraction)
    return prediction, prediction == normalise(gold)
