"""TextStream: one request's answer as text deltas while it decodes (`for delta in vl.stream(image, question)`).

The decoding runs in a worker thread and hands each step's committed tokens over a one-place queue (so it runs
at most a step ahead of the consumer); the consumer gets only the text they add, as core/stop_strings.py's
StreamedText sends it (a character split over byte-level tokens waits for its last byte; with stop strings nothing
that a stop string cuts is ever sent), so the pieces join to `result.text`. Stopping (`break`, leaving a `with` block,
`close()`) makes the next
step raise StopDecoding inside the backend, which ends the decoding (vLLM aborts the engine's request);
`result` is then None."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

from .core.stop_strings import StreamedText

_DONE = object()


class StopDecoding(Exception):
    """Raised from the step callback when the stream's consumer stopped: the decoding ends early."""


class TextStream:
    """Iterate for text deltas; `result` is the GenerationResult once the stream is exhausted."""

    def __init__(
        self,
        run: Callable[[Callable], object],
        decode: Callable[[list[int]], str],
        stop: tuple[str, ...] = (),
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
    ):
        """run(on_step) decodes the request, calling on_step(rows) after each step; decode(ids) -> text; stop,
        include_stop_str_in_output and min_tokens: the request's (its config's) stop-string settings."""
        # one step in hand at most: the decoding runs no further ahead of the consumer than that
        self._queue, self._stopped = queue.Queue(maxsize=1), threading.Event()
        self._text = StreamedText(
            decode, tuple(stop), include_stop_str_in_output, min_tokens
        )
        self.result, self._error = None, None
        self._worker = threading.Thread(
            target=self._work, args=(run,), daemon=True, name="asymspec-stream"
        )
        self._worker.start()

    def _work(self, run: Callable[[Callable], object]) -> None:
        try:
            self.result = run(self._on_step)
        except StopDecoding:
            pass
        except BaseException as e:  # handed to the consumer, raised from its next()
            self._error = e
        finally:
            self._hand_over(_DONE)

    def _on_step(self, rows) -> None:
        if not self._hand_over(list(rows[0].token_ids)):
            raise StopDecoding()

    def _hand_over(self, item) -> bool:
        """Put item on the queue unless the consumer stops first (then False)."""
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[str]:
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    break
                delta = self._text.push(item)
                if delta:
                    yield delta
        except GeneratorExit:  # the consumer broke out of its loop: stop the decoding
            self._stopped.set()
            raise
        if self._error is not None:
            raise self._error
        if (
            self.result is not None
        ):  # the text held back, or the final text's end (a stop string cut it)
            tail = self._text.end(self.result.text)
            if tail:
                yield tail

    def stop(self) -> None:
        """End the decoding at its next step and wait for the worker (`result` stays None unless it had
        finished)."""
        self._stopped.set()
        self._worker.join()

    close = stop

    def __enter__(self) -> TextStream:
        return self

    def __exit__(self, *exc) -> None:
        if self._worker.is_alive():
            self.stop()
