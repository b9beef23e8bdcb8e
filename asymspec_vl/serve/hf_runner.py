"""The server's transformers runner: one batch at a time on a thread of its own. The requests waiting when a batch
starts that share its method and config decode together (up to max_batch); the rest wait for the next batch.
No continuous batching: a request that arrives mid-batch waits for the batch to end (use the vLLM backend to serve
many users). A request whose client left stops getting tokens; its batch stops early when every request of it left.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ..api import AsymSpecVL
from ..core.config import AsymSpecConfig
from ..core.loop import RowOutput
from ..core.methods import METHODS, Method
from ..core.request_plan import RequestPlan
from ..inputs.prompts import EncodedRequest
from .runner import Progress
from .settings import ServeSettings


class _BatchLeft(Exception):
    """Every request of the batch was abandoned: stop decoding it."""


@dataclass(eq=False)  # a job is itself: compared by identity (its fields hold tensors)
class _Job:
    enc: EncodedRequest
    plan: RequestPlan
    loop: asyncio.AbstractEventLoop
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)
    abandoned: bool = False

    def send(self, item) -> None:
        self.loop.call_soon_threadsafe(self.updates.put_nowait, item)


class HFRunner:
    methods = tuple(METHODS)

    def __init__(self, vl: AsymSpecVL, max_batch: int = 16):
        self.vl, self.max_batch = vl, max_batch
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.running: list[_Job] = []
        self._thread = threading.Thread(
            target=self._serve, name="asymspec-hf-runner", daemon=True
        )
        self._thread.start()

    @classmethod
    def load(cls, settings: ServeSettings, loop=None) -> HFRunner:
        vl = AsymSpecVL.from_pretrained(
            drafter=settings.drafter,
            verifier=settings.verifier,
            backend="hf",
            device=settings.device,
            dtype=settings.dtype,
        )
        return cls(vl, settings.engine_kwargs.get("max_num_seqs", 16))

    def plan(self, method: Method, cfg: AsymSpecConfig) -> RequestPlan:
        return self.vl.backend.plan_request(method, cfg)

    def context_of(self, plan: RequestPlan):
        return lambda model: self.vl.backend.context_length(model, plan)

    async def stream(
        self, enc: EncodedRequest, plan: RequestPlan
    ) -> AsyncIterator[Progress]:
        job = _Job(enc, plan, asyncio.get_running_loop())
        self.jobs.put(job)
        try:
            while True:
                item = await job.updates.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.row is not None:
                    return
        finally:
            job.abandoned = True

    def _serve(self) -> None:
        waiting: list[_Job] = []
        while True:
            if not waiting:
                job = self.jobs.get()
                if job is None:
                    return
                waiting.append(job)
            while not self.jobs.empty():
                job = self.jobs.get()
                if job is None:
                    return
                waiting.append(job)
            waiting = [j for j in waiting if not j.abandoned]
            if waiting:
                batch = [j for j in waiting if j.plan == waiting[0].plan]
                batch = batch[: self.max_batch]
                waiting = [
                    j for j in waiting if j not in batch
                ]  # by identity (eq=False)
                self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        def on_step(rows: list[RowOutput]) -> None:
            if all(j.abandoned for j in batch):
                raise _BatchLeft
            for job, row in zip(batch, rows):
                if not row.done:  # a finished row's last step goes out with its row (vLLM's last chunk)
                    job.send(
                        Progress(list(row.token_ids), logprobs=_copied(row.logprobs))
                    )

        self.running = batch
        try:
            rows = self.vl.backend.run(
                [j.enc for j in batch], batch[0].plan, on_step=on_step
            )
        except _BatchLeft:
            return
        except Exception as e:  # not about one request (the backend marks those): every request of the batch gets it
            for job in batch:
                job.send(e)
            return
        finally:
            self.running = []
        for job, row in zip(batch, rows):
            job.send(Progress(list(row.token_ids), row, _copied(row.logprobs)))

    async def engine_gauges(self) -> dict[str, float]:
        return {"unfinished:hf": len(self.running) + self.jobs.qsize()}

    async def scheduler_gauges(self) -> dict[str, float]:
        """The batch being decoded is running, the queued jobs wait (transformers keeps no paged KV cache)."""
        return {"running": len(self.running), "waiting": self.jobs.qsize()}

    async def check_health(self) -> None:
        if not self._thread.is_alive():
            raise RuntimeError("the transformers runner's thread has stopped")

    def close(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)


def _copied(logprobs: list | None) -> list | None:
    """The row's logprobs so far (the loop goes on appending to its own list)."""
    return list(logprobs) if logprobs is not None else None
