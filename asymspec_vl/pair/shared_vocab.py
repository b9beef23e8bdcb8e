"""What a pair's two vocabularies share, as every surface reports it (the API's result and `vl.pair`, `generate`,
the server's start-up line, /v1/models and `asymspec` object, the demo's settings line): one family or
cross-family, the shared set's size and share of each vocabulary, and the special tokens that end an answer."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.vocab_align import VocabMap

# The map's roles that end an answer, in the order the map pairs them (vocab_map.py: the answer's end first).
END_ROLES = ("answer_end", "turn_end", "eos")


@dataclass(frozen=True)
class SharedVocabulary:
    """One family (cross_family False: one vocabulary, all of it shared) or a cross-family map's shared set."""

    cross_family: bool
    shared: int  # tokens both models have, the only ones the pair commits
    drafter_size: int  # the drafter's logit rows (Vd)
    verifier_size: int  # the verifier's logit rows (Vv)
    # (drafter token, verifier token) the map pairs as the end of an answer; None for one vocabulary
    answer_end: tuple[str, str] | None = None

    @property
    def drafter_share(self) -> float:
        return self.shared / self.drafter_size

    @property
    def verifier_share(self) -> float:
        return self.shared / self.verifier_size

    def line(self) -> str:
        """One line for people: 'one vocabulary (426 tokens), same family' or 'cross-family: 244 shared tokens
        (57.3% of the drafter's 426, 88.4% of the verifier's 276); answer end <|im_end|> -> <|eot_id|>'."""
        if not self.cross_family:
            return f"same family: one vocabulary ({self.verifier_size} tokens)"
        end = (
            f"; answer end {self.answer_end[0]} -> {self.answer_end[1]}"
            if self.answer_end
            else ""
        )
        return (
            f"cross-family: {self.shared} shared tokens ({self.drafter_share:.1%} of the drafter's "
            f"{self.drafter_size}, {self.verifier_share:.1%} of the verifier's {self.verifier_size}){end}"
        )

    def to_dict(self) -> dict:
        end = self.answer_end
        return {
            "cross_family": self.cross_family,
            "shared_tokens": self.shared,
            "drafter_vocab_size": self.drafter_size,
            "verifier_vocab_size": self.verifier_size,
            "drafter_share": round(self.drafter_share, 4),
            "verifier_share": round(self.verifier_share, 4),
            "answer_end": {"drafter": end[0], "verifier": end[1]} if end else None,
        }


def shared_vocabulary(
    vmap: VocabMap, drafter_tokenizer, verifier_tokenizer
) -> SharedVocabulary:
    """The summary of `vmap` (the pair's map), its answer-end tokens named by each model's tokenizer."""
    if vmap.identity:
        return SharedVocabulary(False, vmap.size, vmap.drafter_size, vmap.verifier_size)
    role = next((r for r in END_ROLES if r in vmap.specials), None)
    end = None
    if role is not None:
        d, v = vmap.specials[role]
        end = (
            drafter_tokenizer.convert_ids_to_tokens(int(d)),
            verifier_tokenizer.convert_ids_to_tokens(int(v)),
        )
    return SharedVocabulary(True, vmap.size, vmap.drafter_size, vmap.verifier_size, end)
