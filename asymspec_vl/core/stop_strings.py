"""Stop strings, found and cut as vLLM's detokenizer does (vllm/v1/engine/detokenizer.py, check_stop_strings).

After each decoding step the answer's text is searched for the stop strings in their given order, only in the
text the step added (plus len(stop) - 1 characters before it, so a stop string split over steps is found) and
only once more than min_tokens tokens are out (text of the first min_tokens tokens is never searched). The
first stop string found ends the answer (finish_reason "stop"): its text ends before it, or after it with
include_stop_str_in_output. The token ids keep the whole step, as vLLM's output does.
"""

from __future__ import annotations

from typing import Callable


def check(text: str, new_chars: int, stop: tuple[str, ...], include: bool) -> tuple[str, int] | None:
    """(the stop string found, the length to cut text to, -1 for none) in the last new_chars characters."""
    if not new_chars or not stop:
        return None
    for s in stop:
        i = text.find(s, max(0, len(text) - new_chars - len(s) + 1))
        if i == -1:
            continue
        end = i + len(s) if include else i
        return s, (-1 if end >= len(text) else end)
    return None


class StopStrings:
    """One row's stop-string watch: decode(ids) -> the answer's text (special tokens skipped)."""

    def __init__(self, decode: Callable[[list[int]], str], stop: tuple[str, ...], include: bool, min_tokens: int):
        self.decode, self.stop, self.include, self.min_tokens = decode, stop, include, min_tokens
        self.text: str | None = None  # the cut text once a stop string was found

    def after_step(self, ids: list[int], num_before: int) -> bool:
        """The row's tokens after a step (num_before of them before it): whether a stop string ends it."""
        if len(ids) <= self.min_tokens or len(ids) == num_before:
            return False
        text = self.decode(ids)
        searched_from = len(self.decode(ids[:max(num_before, self.min_tokens)]))
        found = check(text, len(text) - searched_from, self.stop, self.include)
        if found is None:
            return False
        self.text = text if found[1] == -1 else text[:found[1]]
        return True
