"""Stream one generation: AsymSpecVL.generate runs in a worker thread, its per-step rows come back as snapshots."""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from asymspec_vl.core.trace import Stats


@dataclass
class Snapshot:
    """The answer so far: token ids with their trace sources, the counters, and the wall time since start."""

    token_ids: list[int]
    sources: list[str]
    stats: Stats
    elapsed_s: float


class Cancelled(Exception):
    """Raised inside on_step when the consumer stopped listening (a closed tab, a cancelled API call) or `stop`
    was set (the page's Stop button); stream_generate re-raises it to the consumer."""


def stream_generate(
    vl,
    lock: threading.Lock,
    stop: threading.Event | None = None,
    entry: str = "generate",
    **generate_kwargs,
) -> Iterator[Snapshot | object]:
    """Yield Snapshots while `vl.generate(**generate_kwargs)` (entry "generate_chat": vl.generate_chat) decodes,
    then its GenerationResult.
    Errors of the generation are re-raised here, Cancelled when `stop` was set. Snapshots that arrive faster
    than the consumer takes them are coalesced into the latest one. Setting `stop` or closing the iterator
    stops the decoding at its next step."""
    closed = threading.Event()
    events: queue.Queue = queue.Queue()
    start = time.perf_counter()

    def cancelled() -> bool:
        return closed.is_set() or (stop is not None and stop.is_set())

    def on_step(rows) -> None:  # rows: list[loop.RowOutput], one row here
        if cancelled():
            raise Cancelled()
        r = rows[0]
        events.put(
            (
                "step",
                Snapshot(
                    list(r.token_ids),
                    list(r.sources),
                    copy.deepcopy(r.stats),
                    time.perf_counter() - start,
                ),
            )
        )

    def work() -> None:
        try:
            with lock:  # one generation at a time on the shared models
                if cancelled():
                    raise Cancelled()
                events.put(
                    ("done", getattr(vl, entry)(on_step=on_step, **generate_kwargs))
                )
        except BaseException as e:  # handed to the consumer, which re-raises it
            events.put(("error", e))

    worker = threading.Thread(target=work, name="asymspec-demo-generate", daemon=True)
    worker.start()
    try:
        while True:
            batch = [events.get()]
            while (
                not events.empty()
            ):  # coalesce: of the steps that arrived, only the newest state matters
                batch.append(events.get_nowait())
            steps = [payload for kind, payload in batch if kind == "step"]
            if steps:
                yield steps[-1]
            for kind, payload in batch:
                if kind == "error":
                    raise payload
                if kind == "done":
                    yield payload
                    return
    finally:
        closed.set()  # a consumer that stops early ends the decoding at its next step
