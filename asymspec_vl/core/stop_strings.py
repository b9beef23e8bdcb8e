"""Stop strings, found and cut as vLLM's detokenizer does (vllm/v1/engine/detokenizer.py, check_stop_strings),
and the answer's text as a stream sends it (vLLM's stop buffer): the one implementation every front end uses.

After each decoding step the answer's text is searched for the stop strings in their given order (the first one
in that order found in the step's window wins, as in vLLM), only in the text the step added (plus len(stop) - 1
characters before it, so a stop string split over steps is found) and only once more than min_tokens tokens are
out (text of the first min_tokens tokens is never searched). The first stop string found ends the answer
(finish_reason "stop"): its text ends before it, or after it with include_stop_str_in_output. The token ids keep
the whole step, as vLLM's output does. A character split over byte-level tokens counts once its last byte is
out (vLLM's incremental detokenizer emits nothing before).
"""

from __future__ import annotations

from collections.abc import Callable

INCOMPLETE = (
    "\ufffd"  # what decode() shows for a character whose last byte is not out yet
)


def check(
    text: str, new_chars: int, stop: tuple[str, ...], include: bool
) -> tuple[str, int] | None:
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


def complete(text: str) -> str:
    """text without a trailing incomplete character."""
    return text.rstrip(INCOMPLETE)


class StopStrings:
    """One row's stop-string watch: decode(ids) -> the answer's text (special tokens skipped)."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stop: tuple[str, ...],
        include: bool,
        min_tokens: int,
    ):
        self.decode, self.stop, self.include, self.min_tokens = (
            decode,
            tuple(stop),
            include,
            min_tokens,
        )
        self.text: str | None = None  # the cut text once a stop string was found
        self.found: str | None = None  # the stop string that ended the answer

    def after_step(self, ids: list[int], num_before: int) -> bool:
        """The row's tokens after a step (num_before of them before it): whether a stop string ends it."""
        if self.found is not None:
            return True
        if not self.stop or len(ids) <= self.min_tokens or len(ids) == num_before:
            return False
        text = complete(self.decode(ids))
        searched_from = len(
            complete(self.decode(ids[: max(num_before, self.min_tokens)]))
        )
        found = check(text, len(text) - searched_from, self.stop, self.include)
        if found is None:
            return False
        self.found, self.text = found[0], (text if found[1] == -1 else text[: found[1]])
        return True


class StreamedText:
    """One answer's text as a stream sends it: push(ids) after each step returns what may be sent now, end(text)
    with the final text what is left. Nothing sent is ever cut later: the last len(longest stop) - 1 characters
    wait until the answer ends (vLLM's stop buffer; none with include_stop_str_in_output), an incomplete
    character waits for its last byte, and once a stop string is seen nothing more is sent before the end. Steps
    that arrive merged (a slow consumer) change nothing sent, so the pieces always join to the final text."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stop: tuple[str, ...] = (),
        include: bool = False,
        min_tokens: int = 0,
    ):
        self.decode, self.sent, self.num_tokens = decode, "", 0
        self.watch = StopStrings(decode, stop, include, min_tokens)
        self.hold = (
            max((len(s) for s in stop), default=1) - 1 if stop and not include else 0
        )

    def push(self, ids: list[int]) -> str:
        """What the step that made the answer's tokens `ids` adds to the text sent."""
        before, self.num_tokens = self.num_tokens, len(ids)
        if self.watch.after_step(ids, before):
            return ""  # the end's text (end()) says where the answer stops
        text = complete(self.decode(ids))
        return self._send(text[: max(0, len(text) - self.hold)])

    def end(self, text: str) -> str:
        """The final text's part not sent yet."""
        return self._send(text)

    def _send(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta
