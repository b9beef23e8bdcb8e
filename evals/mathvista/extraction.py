"""Rule-based answer extraction from a free-text (chain-of-thought) response, MathVista's cheap rules first.

extract(response, facts) tries, in order:
  1. quick_extract: MathVista's official cheap rules - an empty response gives ""; a multi-choice response
     that is exactly one of the choices; an integer answer type and int(response) parses; a float answer
     type and float(response) parses; the pattern `The answer is "(.*)".`;
  2. the final-answer span: the last \\boxed{...}, else the rest of the line after the last "final answer",
     else after the last "answer is" / "answer:";
  3. by answer type:
     multi_choice -> from the span: an option letter within the number of choices ("B", "(B) 45", "option
       B"), else a choice it contains as a whole word; then the same from the last line, where a bare letter
       must be the whole line; then the span itself (scoring maps it to the nearest choice); then the last
       "(X)" of the response;
     integer / float -> a number from the span (after its last "="; \\frac{a}{b} and a/b evaluated;
       "1,234" -> "1234"; exponents and subscripts skipped), else the last number of the last line, else of
       the whole response;
     list -> the last [...] literal of the span, else of the response, printed like Python's str(list);
  4. "" when nothing is found (scored as the official rules score an empty extraction).
"""

from __future__ import annotations

import ast
import re

NUMBER = r"(?<![\^_\w.])(?:-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+)"  # not an exponent / subscript
_FRAC = re.compile(r"(-?)\\[dt]?frac\{\s*(-?[\d.]+)\s*\}\{\s*(-?[\d.]+)\s*\}")
_SLASH = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$")


def quick_extract(response: str, facts: dict) -> str | None:
    """MathVista's official cheap rules; None when none applies (the caller goes on)."""
    if response == "":
        return ""
    if facts["question_type"] == "multi_choice" and response in (
        facts.get("choices") or []
    ):
        return response
    if facts["answer_type"] == "integer":
        try:
            return str(int(response))
        except ValueError:
            pass
    if facts["answer_type"] == "float":
        try:
            return str(float(response))
        except ValueError:
            pass
    m = re.search(r'The answer is "(.*)"\.', response)
    return m.group(1) if m else None


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def final_span(response: str) -> str | None:
    """The stated final answer: the last \\boxed{}, else the rest of the line after the last "final answer"
    (is / : / =), else after the last "answer is" / "answer:"."""
    boxed = last_boxed(response)
    if boxed is not None:
        return clean(boxed)
    for pattern in (r"final answer\s*(?:is\b|:|=)?\s*:?", r"answer\s*(?:is\b|:)\s*:?"):
        for m in reversed(list(re.finditer(pattern, response, flags=re.IGNORECASE))):
            rest = clean(response[m.end() :].split("\n", 1)[0])
            if rest:
                return rest
    return None


def clean(span: str) -> str:
    """Strip markdown, LaTeX wrappers and trailing punctuation from an answer span."""
    s = span.replace("\u2212", "-").replace("**", "").replace("$", "")
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = s.replace("\\(", "").replace("\\)", "").replace("\\%", "%").replace("\\!", "")
    return s.strip().strip("*:").strip().rstrip(".").strip()


def option_letter(text: str, n_choices: int, strict: bool = False) -> str | None:
    """An option letter (within A.. the n-th letter) the text states: "(B)" or "option B" anywhere (the last
    one), or a text that starts with the letter ("B", "B.", "B) 45"; strict: the whole text is the letter)."""
    valid = "".join(chr(ord("A") + i) for i in range(n_choices))
    if not valid:
        return None
    head = (
        rf"^\(?([{valid}])\)?[.:)]?$" if strict else rf"^\(?([{valid}])\)?(?:[.:)\s]|$)"
    )
    for pattern in (
        head,
        rf"\(([{valid}])\)",
        rf"\b(?:option|choice)\s*(?:is\s+)?\(?([{valid}])\)?(?!\w)",
    ):
        found = re.findall(pattern, text.strip())
        if found:
            return found[-1]
    return None


def choice_in(text: str, choices: list[str]) -> str | None:
    """The longest choice that the text equals or contains as a whole word / number (case-insensitive)."""
    low = text.lower()
    hits = [
        c
        for c in choices
        if c.strip()
        and re.search(rf"(?<![\w.]){re.escape(c.strip().lower())}(?!\w)(?!\.\d)", low)
    ]
    return max(hits, key=len) if hits else None


def number_in(span: str, last: bool = False) -> str | None:
    """A number in the span: after its last "=", fractions evaluated, thousands separators dropped."""
    s = span.split("=")[-1] if "=" in span else span
    frac = _FRAC.search(s)
    if frac:
        sign, a, b = frac.groups()
        value = _ratio(
            a, b, negate=bool(sign)
        )  # -\frac{-1}{2} = 0.5: the signs multiply
        if value is not None:
            return value
    slash = _SLASH.match(s)
    if slash:
        value = _ratio(*slash.groups())
        if value is not None:
            return value
    found = re.findall(NUMBER, s)
    if not found:
        return None
    return (found[-1] if last else found[0]).replace(",", "")


def _ratio(a: str, b: str, negate: bool = False) -> str | None:
    """a / b (negated if asked) printed as a float; None when it is not a number."""
    try:
        value = float(a) / float(b)
    except (ValueError, ZeroDivisionError):
        return None
    return str((-value if negate else value) + 0.0)  # + 0.0: -0.0 prints as 0.0


def list_in(text: str) -> str | None:
    """The last [...] literal, printed like Python's str(list) ("[2014,2016]" -> "[2014, 2016]")."""
    for raw in reversed(re.findall(r"\[[^\[\]]*\]", text)):
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, list):
            return str(value)
    return None


def extract(response: str, facts: dict) -> str:
    """The answer stated in `response` (rules in the module docstring); "" if none is found."""
    quick = quick_extract(response, facts)
    if quick is not None:
        return quick
    response = response.replace("\u2212", "-")  # unicode minus
    span = final_span(response)
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    last_line = clean(lines[-1]) if lines else ""
    if facts["question_type"] == "multi_choice":
        choices = facts.get("choices") or []
        for text, strict in ((span, False), (last_line, True)):
            found = text and (
                option_letter(text, len(choices), strict) or choice_in(text, choices)
            )
            if found:
                return found
        return span or option_letter(response, len(choices), strict=True) or ""
    if facts["answer_type"] in ("integer", "float"):
        found = number_in(span) if span else None
        return (
            found
            or number_in(last_line, last=True)
            or number_in(response, last=True)
            or ""
        )
    if facts["answer_type"] == "list":
        return list_in(span or "") or list_in(response) or ""
    return span or last_line


class RuleExtractor:
    """The rule-based extractor behind the same interface as llm_extract.LLMExtractor."""

    name = "rule"

    def extract(self, response: str, facts: dict, query: str = "") -> str:
        return extract(response, facts)
