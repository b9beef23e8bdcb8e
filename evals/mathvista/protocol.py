"""The paper's MathVista protocol (§5.2, Appendix B): which problems, what each model reads, how it decodes.

Defaults (the paper's): GPS + VQA + FQA problems with an official Bard caption (587 of testmini's 1,000);
greedy decoding, K = 4, beta = 1, gamma = 0.5, CDA gate, at most 1,024 new tokens. <question> is the official
zero-shot query (query.json: "Hint: ...\nQuestion: ...\nChoices: ...") + "\n" + the chain-of-thought suffix
"Let's think step by step, then give the final answer.".

Two prompt protocols (EvalProtocol.name) say what the verifier reads, x_comp's text:
  official  "Image description:\n<Bard caption, stripped, first 1,600 characters>\n\nText in the image
            (OCR):\n<official EasyOCR text in reading order, first 800 characters>\n\n<question>" (the layout of
            asymspec_vl.inputs.prompts.verifier_text);
  release   the authors' released harness: "Image caption: ...", "OCR text from image: ..." (EasyOCR texts in
            stored order), <question> (release.py has the rules).
The drafter reads the image + that same text (AsymSpec) or the image + <question> alone (the drafter-alone
baseline). Floor, SD and SCD read x_comp only, so their requests carry no image: a broken image fails only
the methods that read it (IMAGE_METHODS).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.method_names import (
    IMAGE_METHODS,
)  # x_question and x_full hold the image; floor, sd, scd read x_comp
from asymspec_vl.inputs.prompts import Request, verifier_text

from . import release
from .data import Problem

TASKS = {
    "GPS": "geometry problem solving",
    "VQA": "visual question answering",
    "FQA": "figure question answering",
    "MWP": "math word problem",
    "TQA": "textbook question answering",
}
TASK_ABBREV = {v: k for k, v in TASKS.items()}
PAPER_TASKS = ("GPS", "VQA", "FQA")
COT_SUFFIX = "Let's think step by step, then give the final answer."
PAPER_DECODING = {
    "K": 4,
    "beta": 1.0,
    "gamma": 0.5,
    "gate": "cda",
    "max_new_tokens": 1024,
}
PROTOCOLS = ("official", "release")


@dataclass(frozen=True)
class EvalProtocol:
    """What the eval selects and feeds the models (the decoding config is separate: AsymSpecConfig)."""

    name: str = "official"  # the prompt protocol (PROTOCOLS); its scoring rules make the headline numbers
    tasks: tuple[str, ...] = PAPER_TASKS
    require_caption: bool = True  # keep only problems with an official Bard caption
    caption_chars: int = 1600
    ocr_chars: int = 800
    cot_suffix: str = COT_SUFFIX

    def __post_init__(self) -> None:
        if self.name not in PROTOCOLS:
            raise ConfigError(
                f"unknown MathVista protocol {self.name!r}; choose from {', '.join(PROTOCOLS)}"
            )
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ConfigError(
                f"unknown MathVista task(s) {unknown}; choose from {', '.join(TASKS)} or 'all'"
            )
        for name in ("caption_chars", "ocr_chars"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(
                    f"EvalProtocol.{name}={v!r} is invalid: expected an integer >= 0"
                )

    def to_dict(self) -> dict:
        return asdict(self)


def parse_tasks(text: str) -> tuple[str, ...]:
    """'GPS,VQA,FQA' (abbreviations or full task names, any case) or 'all' -> task abbreviations."""
    if text.strip().lower() == "all":
        return tuple(TASKS)
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        abbrev = (
            part.upper() if part.upper() in TASKS else TASK_ABBREV.get(part.lower())
        )
        if abbrev is None:
            raise ConfigError(
                f"unknown MathVista task {part!r}; choose from {', '.join(TASKS)} or 'all'"
            )
        out.append(abbrev)
    return tuple(dict.fromkeys(out))


def task_of(problem: Problem) -> str:
    return TASK_ABBREV.get(problem.task, problem.task)


def select(
    problems: dict[str, Problem],
    protocol: EvalProtocol,
    has_caption,
    limit: int | None = None,
    pids: list[str] | None = None,
) -> list[Problem]:
    """The protocol's problems in pid order (has_caption(pid) -> bool), restricted to `pids` if given, then
    the first `limit` of them."""
    keep = [
        p
        for p in problems.values()
        if task_of(p) in protocol.tasks
        and (not protocol.require_caption or has_caption(p.pid))
    ]
    if pids:
        wanted = {str(x) for x in pids}
        outside = sorted(wanted - {p.pid for p in keep})
        if outside:
            raise ConfigError(
                f"pid(s) {outside[:10]} are not in the selection (tasks {','.join(protocol.tasks)}"
                f"{', with a Bard caption' if protocol.require_caption else ''})"
            )
        keep = [p for p in keep if p.pid in wanted]
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit {limit} is invalid: expected at least 1")
        keep = keep[:limit]
    return keep


def question_text(problem: Problem, protocol: EvalProtocol) -> str:
    """The official query, then the chain-of-thought suffix on its own line."""
    suffix = protocol.cot_suffix.strip()
    return f"{problem.query.strip()}\n{suffix}" if suffix else problem.query.strip()


def verifier_view(problem: Problem, captioner, protocol: EvalProtocol) -> str:
    """The verifier's whole user message (x_comp's text) under the protocol."""
    question = question_text(problem, protocol)
    if protocol.name == "release":
        caption = captioner.captions.get(problem.pid, "")[: protocol.caption_chars]
        ocr = release.ocr_join(captioner.ocr.get(problem.pid))[: protocol.ocr_chars]
        return release.user_text(caption, ocr, question)
    text = captioner.describe(image=None, key=problem.pid)
    return verifier_text(
        question,
        text.caption.strip()[: protocol.caption_chars],
        text.ocr.strip()[: protocol.ocr_chars],
    )


def build_request(
    problem: Problem, method: str, image, captioner, protocol: EvalProtocol
) -> Request:
    """The request of one problem for one method. The drafter alone: the image + <question>; AsymSpec: the
    image + the verifier's text (the same text is x_comp); floor, sd, scd: the verifier's text and no image
    (image may be None for them: it is never read)."""
    if method == "drafter":
        return Request(image, question_text(problem, protocol))
    view = verifier_view(problem, captioner, protocol)
    if method in IMAGE_METHODS:
        return Request(image, view)
    return Request(
        question=view, full_context=""
    )  # text only: x_comp is the view, the drafter's views go unused
