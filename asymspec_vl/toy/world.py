"""The toy image-QA world: scenes of three shapes carrying digits, captions that name the shapes but never
the digits, three question types, chain-of-thought answers that start with the digits read off the image.

Question types (the columns of the eval table, like MathVista's GPS / VQA / FQA):
  read  "What number is on the red circle?"                 -> "7. The answer is 7."
  sum   "What is the sum of the numbers on the A and the B?" -> "7 + 8 = 15. The answer is 15."
  mult  "What is the number on the red circle times 17?"    -> "7 × 17 = 119. The answer is 119."
The caption ("Three shapes from left to right: a red circle, ...") says which shapes are there, not their
digits, so the verifier alone (the Floor) can only guess them. The verifier's advantage is arithmetic: it is
also trained on a text-only arithmetic curriculum (`arithmetic_example`), which the drafter never sees.
Everything is a deterministic function of integer entropy tuples (numpy SeedSequence + PCG64).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .draw import COLOURS, SHAPES, render_scene

QTYPES = ("read", "sum", "mult")
NUM_ITEMS = 3
MULTIPLIERS = tuple(range(11, 100))  # mult questions: digit x two-digit number
# Random streams are keyed by entropy tuples (numpy SeedSequence): training scenes (TRAIN, seed, index),
# held-out examples (HELDOUT, i); the first entry keeps the two sets apart for every seed.
TRAIN, HELDOUT, CURRICULUM = 1, 2, 3

READ_Q = (
    "What number is on the {a}?",
    "Which number does the {a} carry?",
    "Read the number on the {a}.",
)
SUM_Q = (
    "What is the sum of the numbers on the {a} and the {b}?",
    "Add the numbers on the {a} and the {b}.",
)
MULT_Q = (
    "What is the number on the {a} times {m}?",
    "Multiply the number on the {a} by {m}.",
)
ARITH_Q = {
    "sum": ("What is {x} plus {y}?", "Add {x} and {y}."),
    "mult": ("What is {x} times {y}?", "Multiply {x} by {y}."),
}


@dataclass(frozen=True)
class Item:
    colour: str
    shape: str
    digit: int

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass
class ToyExample:
    """One question about one rendered scene; `image()` renders it (deterministic in render_seed)."""

    uid: str
    qtype: str
    items: tuple[Item, ...]
    question: str
    caption: str
    answer: str  # the chain-of-thought answer text both models are trained on
    target: int  # the correct final number
    entropy: tuple[
        int, ...
    ]  # the random stream of its scene; the image is rendered from entropy + (0,)
    meta: dict = field(default_factory=dict)

    def image(self):
        return render_scene(self.items, self.entropy + (0,))


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def caption_of(items: tuple[Item, ...]) -> str:
    """The compressed view: shapes and colours, left to right, never the digits."""
    names = [f"{_article(it.colour)} {it.name}" for it in items]
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    return f"Three shapes from left to right: {listed}. Each shape carries a number."


def sum_answer(x: int, y: int) -> str:
    return f"{x} + {y} = {x + y}. The answer is {x + y}."


def mult_answer(x: int, y: int) -> str:
    return f"{x} × {y} = {x * y}. The answer is {x * y}."


def sample_scene(rng: np.random.Generator) -> tuple[Item, ...]:
    colours = rng.choice(len(COLOURS), NUM_ITEMS, replace=False)
    shapes = rng.choice(len(SHAPES), NUM_ITEMS, replace=False)
    digits = rng.integers(0, 10, NUM_ITEMS)
    names = list(COLOURS)
    return tuple(
        Item(names[c], SHAPES[s], int(d)) for c, s, d in zip(colours, shapes, digits)
    )


def ask(
    items: tuple[Item, ...], qtype: str, rng: np.random.Generator
) -> tuple[str, str, int]:
    """One question of type qtype about a scene: (question, chain-of-thought answer, target)."""
    i, j = (int(v) for v in rng.choice(len(items), 2, replace=False))
    a, b = items[i], items[j]
    if qtype == "read":
        question = READ_Q[int(rng.integers(len(READ_Q)))].format(a=a.name)
        return question, f"{a.digit}. The answer is {a.digit}.", a.digit
    if qtype == "sum":
        question = SUM_Q[int(rng.integers(len(SUM_Q)))].format(a=a.name, b=b.name)
        return question, sum_answer(a.digit, b.digit), a.digit + b.digit
    if qtype == "mult":
        m = MULTIPLIERS[int(rng.integers(len(MULTIPLIERS)))]
        question = MULT_Q[int(rng.integers(len(MULT_Q)))].format(a=a.name, m=m)
        return question, mult_answer(a.digit, m), a.digit * m
    raise ValueError(f"unknown question type {qtype!r}; expected one of {QTYPES}")


def scene_examples(
    entropy: tuple[int, ...], qtypes: tuple[str | None, ...], uid: str
) -> list[ToyExample]:
    """Examples sharing one scene (and image), one per entry of qtypes (None: type drawn uniformly)."""
    rng = np.random.default_rng(list(entropy))
    items = sample_scene(rng)
    out = []
    for k, qtype in enumerate(qtypes):
        qtype = qtype or QTYPES[int(rng.integers(len(QTYPES)))]
        question, answer, target = ask(items, qtype, rng)
        out.append(
            ToyExample(
                uid + (f"-{k}" if len(qtypes) > 1 else ""),
                qtype,
                items,
                question,
                caption_of(items),
                answer,
                target,
                tuple(entropy),
            )
        )
    return out


def train_scene(
    seed: int, stream: int, index: int, qtypes: tuple[str | None, ...]
) -> list[ToyExample]:
    """The index-th scene of one training stream (a model's data) of the run with this seed, one question
    per qtypes entry."""
    return scene_examples(
        (TRAIN, seed, stream, index), qtypes, uid=f"toy-train-{seed}-{stream}-{index}"
    )


def heldout(n: int, qtypes: tuple[str, ...] = QTYPES) -> list[ToyExample]:
    """The fixed held-out set: n examples, question types in turn (balanced), ids toy-heldout-<i>."""
    return [
        scene_examples(
            (HELDOUT, i), (qtypes[i % len(qtypes)],), uid=f"toy-heldout-{i}"
        )[0]
        for i in range(n)
    ]


def arithmetic_example(rng: np.random.Generator) -> tuple[str, str]:
    """The verifier's text-only curriculum: (question, answer) with both operands visible."""
    if rng.random() < 0.75:
        x, y = (
            int(rng.integers(0, 10)),
            MULTIPLIERS[int(rng.integers(len(MULTIPLIERS)))],
        )
        return ARITH_Q["mult"][int(rng.integers(2))].format(x=x, y=y), mult_answer(x, y)
    x, y = (int(v) for v in rng.integers(0, 10, 2))
    return ARITH_Q["sum"][int(rng.integers(2))].format(x=x, y=y), sum_answer(x, y)


_ANSWER = re.compile(r"answer is\s*(-?\d+)")


def extract_answer(text: str) -> int | None:
    """The final number after the last 'answer is'; None when there is none."""
    found = _ANSWER.findall(text)
    return int(found[-1]) if found else None


def is_correct(text: str, example: ToyExample) -> bool:
    return extract_answer(text) == example.target


def tokenizer_corpus() -> list[str]:
    """Text the shared BPE tokenizer is trained on: every template word, colour, shape and symbol."""
    lines = [
        caption_of((Item(c, s, 0), Item(c2, s2, 0), Item(c3, s3, 0)))
        for c, c2, c3 in zip(
            COLOURS,
            list(COLOURS)[1:] + list(COLOURS)[:1],
            list(COLOURS)[2:] + list(COLOURS)[:2],
        )
        for s, s2, s3 in zip(SHAPES, SHAPES[1:] + SHAPES[:1], SHAPES[2:] + SHAPES[:2])
    ]
    names = [f"{c} {s}" for c in COLOURS for s in SHAPES]
    for k, name in enumerate(names):
        lines += [
            q.format(a=name, b=names[-k - 1], m=MULTIPLIERS[k % len(MULTIPLIERS)])
            for q in READ_Q + SUM_Q + MULT_Q
        ]
    lines += [
        q.format(x=k % 10, y=MULTIPLIERS[k % len(MULTIPLIERS)])
        for k in range(20)
        for q in ARITH_Q["mult"]
    ]
    lines += [q.format(x=k % 10, y=k // 10) for k in range(100) for q in ARITH_Q["sum"]]
    lines += [sum_answer(k % 10, k // 10) for k in range(100)] + [
        mult_answer(k % 10, 11 + k) for k in range(89)
    ]
    lines += ["Image description:", "Text in the image (OCR):", "Context:"]
    return lines
