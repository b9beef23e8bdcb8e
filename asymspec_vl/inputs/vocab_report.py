"""The verifier's own words across a pair's map: on a corpus, the share of the verifier's tokens outside the shared set
(tokens the pair never commits), the most frequent of them, and the share of them that are numbers.

Across a map the pair commits only shared tokens (core/vocab_align.py). Where the verifier writes a string as one
token the drafter lacks, the pair spells it in shared pieces instead: Llama-3 writes numbers as up-to-3-digit tokens
('126' is one token), Qwen only single digits, so a Qwen x Llama-3 pair spells every multi-digit number digit by
digit, in a tokenization the verifier never produces itself (docs/cross-family.md, "The verifier's own words").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ..core.errors import InputError

# Warn when at least this share of a corpus's answers hold a number the verifier writes outside the shared set.
# 1 %: MathVista's tables tell methods apart by a point or two of accuracy; answers whose number the verifier cannot
# write its own way are that many points at risk (10 of testmini's 1,000). A Qwen x Llama-3 pair is far above it,
# pairs whose verifier writes numbers digit by digit (Mistral's Tekken and SentencePiece) sit at 0.
NUMBERS_WARN_SHARE = 0.01


def is_number(text: str) -> bool:
    """A token's text is a number: ASCII digits only, once the spaces around it are dropped (' 126', '42')."""
    core = text.strip()
    return bool(core) and core.isascii() and core.isdigit()


@dataclass(frozen=True)
class OutsideToken:
    """One verifier token outside the shared set, as often as the corpus holds it."""

    token_id: int
    text: str  # its decoded text
    count: int
    share: float  # count / every verifier token of the corpus
    number: bool


@dataclass(frozen=True)
class WordsReport:
    """The verifier's tokens on a corpus against a pair's shared set."""

    texts: int
    tokens: int  # the verifier's tokens, all texts
    outside: int  # of them, outside the shared set
    outside_numbers: int  # of those, numbers
    distinct_outside: int  # distinct token ids outside
    texts_with_outside: int  # texts holding at least one token outside
    texts_with_outside_number: int  # texts holding at least one number outside
    top: tuple[
        OutsideToken, ...
    ]  # the most frequent outside tokens, most frequent first

    @property
    def outside_share(self) -> float:
        """Share of the verifier's tokens outside the shared set."""
        return self.outside / self.tokens if self.tokens else 0.0

    @property
    def number_share(self) -> float:
        """Share of the tokens outside the shared set that are numbers."""
        return self.outside_numbers / self.outside if self.outside else 0.0

    @property
    def texts_number_share(self) -> float:
        """Share of the texts holding a number outside the shared set."""
        return self.texts_with_outside_number / self.texts if self.texts else 0.0

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "top": [asdict(t) for t in self.top],
            "outside_share": self.outside_share,
            "number_share": self.number_share,
            "texts_number_share": self.texts_number_share,
        }


def verifier_words(
    vmap, verifier_tok, texts: Iterable[str], top: int = 20
) -> WordsReport:
    """The verifier's tokens of `texts` (its own tokenizer, no special tokens added) against `vmap`'s shared set
    (a VocabMap; one vocabulary: nothing is outside). `top`: how many of the most frequent outside tokens."""
    texts = list(texts)
    bad = next((t for t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise InputError(
            f"a corpus is a list of texts; it holds {type(bad).__name__} {str(bad)[:40]!r}"
        )
    if top < 0:
        raise InputError(f"top={top}: expected a count >= 0")
    shared = [vmap.identity] * vmap.verifier_size  # [Vv] True in the shared set
    if not vmap.identity:
        for j in vmap.verifier_ids.tolist():
            shared[j] = True
    ids = verifier_tok(texts, add_special_tokens=False)["input_ids"] if texts else []
    counts: Counter[int] = Counter()
    tokens = with_outside = with_number = 0
    number_of: dict[int, bool] = {}
    for row in ids:
        tokens += len(row)
        outside = [j for j in row if j >= len(shared) or not shared[j]]
        counts.update(outside)
        for j in set(outside):
            if j not in number_of:
                number_of[j] = is_number(verifier_tok.decode([j]))
        with_outside += bool(outside)
        with_number += any(number_of[j] for j in outside)
    n_outside = sum(counts.values())
    listed = tuple(
        OutsideToken(
            j, verifier_tok.decode([j]), c, c / tokens if tokens else 0.0, number_of[j]
        )
        for j, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    )
    return WordsReport(
        texts=len(texts),
        tokens=tokens,
        outside=n_outside,
        outside_numbers=sum(c for j, c in counts.items() if number_of[j]),
        distinct_outside=len(counts),
        texts_with_outside=with_outside,
        texts_with_outside_number=with_number,
        top=listed,
    )


def describe_words(report: WordsReport, corpus: str) -> str:
    """One line for a pair's description: the share of the verifier's tokens on `corpus` outside the shared set,
    how many of them are numbers, and the most frequent three."""
    head = f"the verifier's tokens outside the shared set on {corpus}: {report.outside_share:.1%} of {report.tokens:,}"
    if not report.outside:
        return head
    frequent = ", ".join(repr(t.text) for t in report.top[:3])
    return (
        f"{head} ({report.number_share:.0%} of them numbers; most frequent: {frequent})"
    )


def numbers_warning(answers: WordsReport, corpus: str) -> str | None:
    """The warning for a corpus whose answers hold numbers the verifier writes outside the shared set, when at least
    NUMBERS_WARN_SHARE of the answers do; None below it."""
    if not answers.texts or answers.texts_number_share < NUMBERS_WARN_SHARE:
        return None
    numbers = [repr(t.text) for t in answers.top if t.number][:3]
    listed = f" ({', '.join(numbers)}, ...)" if numbers else ""
    return (
        f"{answers.texts_with_outside_number} of {corpus}'s {answers.texts:,} answers "
        f"({answers.texts_number_share:.1%}) hold a number the verifier writes as a token outside the shared set"
        f"{listed}: across this map the pair spells it in shared pieces (digit by digit for "
        "Llama-3's up-to-3-digit tokens), a tokenization the verifier never writes itself, so answers in numbers "
        "may score below the verifier's own; `asymspec-vl vocab-report` lists the tokens (docs/cross-family.md)"
    )
