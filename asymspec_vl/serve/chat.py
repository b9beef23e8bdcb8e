"""One chat completion, from a checked ChatJob to the answer: make its plan (method, config, engine: once, by the
runner), fetch the image, complete the verifier's view, encode the three views and check they fit, then decode,
as one JSON response or as server-sent events (each decoding step's tokens in one chunk). Every check runs before
the first token, so a bad request gets its HTTP error even when it asked to stream; a failure after that ends the
stream with an error event. A request past the server's timeout, or whose client left, is aborted in the engine; so
is one still running when the drain after SIGTERM expires (--drain-timeout): it ends with ServerShuttingDownError
(503 JSON, or a last error event and [DONE])."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from functools import partial

from ..core.errors import AsymSpecError, ConfigError
from ..core.methods import METHODS
from ..core.request_plan import RequestPlan
from ..inputs import budget
from ..inputs.conversation import Conversation, encode
from ..inputs.image_fit import processor_fit
from ..inputs.prompts import EncodedRequest
from ..inputs.stop_signal import stoppable
from . import responses as R
from .captioning import View, ViewMaker
from .http_errors import RequestTimeoutError, ServerShuttingDownError, error_body
from .media import (
    TRIM_PIXELS,
    PixelBudget,
    ServerPixels,
    decode_image,
    fetch_image_bytes,
    release_memory,
)
from .metrics import ServeMetrics
from .notes import answer_warnings, serves_toy_pair
from .runner import Progress, Runner
from .settings import ServeSettings
from .translate import ChatJob, with_model_stops

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A request ready to decode."""

    job: ChatJob
    plan: RequestPlan  # the runner's, made once in prepare (job.method and job.cfg on its engine)
    enc: EncodedRequest
    views: list[View]  # per image of the conversation
    started: float  # time.monotonic() when the request arrived
    deadline: float  # loop time by which it must be done
    warnings: tuple[str, ...] = ()  # sentences for asymspec.warnings (notes.py)


class ChatService:
    def __init__(
        self,
        settings: ServeSettings,
        runner: Runner,
        views: ViewMaker,
        metrics: ServeMetrics,
    ):
        self.settings, self.runner, self.views, self.metrics = (
            settings,
            runner,
            views,
            metrics,
        )
        self._drained: asyncio.Future | None = (
            None  # done when the drain timeout expired (made in the event loop)
        )
        self.toy = serves_toy_pair(settings)
        self.pixels = ServerPixels(
            settings.max_server_pixels
        )  # shared by all requests' images (media.py)

    def begin_drain(self) -> None:
        """The server stopped accepting requests (SIGTERM): those still running after --drain-timeout seconds end
        with ServerShuttingDownError (an error object, or a last error event and [DONE] when streamed)."""
        drained = self._drain_signal()
        asyncio.get_running_loop().call_later(
            self.settings.drain_timeout_s,
            lambda: drained.done() or drained.set_result(None),
        )

    def _drain_signal(self) -> asyncio.Future:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        return self._drained

    async def _within(self, awaitable, deadline: float, timeout_message: str):
        """awaitable's result, unless the request's deadline (loop time) passes first (RequestTimeoutError) or the
        server's drain expires (ServerShuttingDownError); either way the awaitable is cancelled and waited for."""
        task = asyncio.ensure_future(awaitable)
        drained = self._drain_signal()
        try:
            await asyncio.wait(
                {task, drained},
                timeout=max(0.0, deadline - asyncio.get_running_loop().time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if (
                not task.done()
            ):  # the deadline, the drain, or this request cancelled (its client left)
                task.cancel()
                await asyncio.wait({task})
        if not task.cancelled():
            return task.result()
        if drained.done():
            raise ServerShuttingDownError(
                f"the server is shutting down: this request was still running when its "
                f"drain timeout of {self.settings.drain_timeout_s} s expired; retry it"
            )
        raise RequestTimeoutError(timeout_message)

    async def prepare(self, job: ChatJob) -> Prepared:
        """Every check of the request, then its encoded views (the whole request counts against the timeout)."""
        started, deadline = (
            time.monotonic(),
            asyncio.get_running_loop().time() + self.settings.request_timeout_s,
        )
        if job.method not in self.runner.methods:
            raise ConfigError(
                f"method {job.method!r} is not served here: this server runs {list(self.runner.methods)}"
                " (the drafter alone needs a server started with --drafter-engine)"
            )
        job = with_model_stops(job, self.runner.vl.pair.eos_ids)
        self.runner.vl.pair.check_stop_ids(job.cfg)
        plan = self.runner.plan(METHODS[job.method], job.cfg)
        pair = self.runner.vl.pair
        budget.check_floor_fits(  # linear in the messages, before any image is fetched or template renders
            [t.role for t in job.turns],
            (pair.processor, pair.tokenizer),
            plan.method,
            plan.cfg,
            self.runner.context_of(plan),
        )
        late = f"preparing the request took over {self.settings.request_timeout_s} s"
        enc, views, warnings = await self._within(
            self._views(job, plan), deadline, late
        )
        for warning in warnings:
            logger.warning("asymspec-vl serve: %s: %s", job.response_id, warning)
        return Prepared(job, plan, enc, views, started, deadline, warnings)

    async def _views(
        self, job: ChatJob, plan: RequestPlan
    ) -> tuple[EncodedRequest, list[View], tuple[str, ...]]:
        """Each image fetched and given its verifier view (the client's, or the captioners' behind their cache),
        then the conversation encoded and checked to fit; and the warnings about the images (notes.py). The
        images are charged to the request's pixel budget before any is decoded (media.PixelBudget), then held in
        the server's (media.ServerPixels: waited for) until the conversation is encoded; each decodes near the
        drafter processor's size (inputs/image_fit.py)."""
        budget = PixelBudget(self.settings.max_request_pixels)
        fetched = [
            await fetch_image_bytes(url, self.settings) for url in job.image_urls
        ]
        for (
            data
        ) in fetched:  # every image charged from its header before any is decoded
            budget.charge(data)
        fit = processor_fit(self.runner.vl.pair.processor)
        async with self.pixels.hold(budget.used):
            try:
                images = [
                    await decode_image(data, self.settings, fit) for data in fetched
                ]
                views = [
                    await self.views.view(im, c, o)
                    for im, c, o in zip(images, job.captions, job.ocrs)
                ]
                stop = threading.Event()
                try:
                    enc = await asyncio.to_thread(
                        stoppable,
                        stop,
                        self._encode,
                        conversation_request(job, images, views),
                        plan,
                    )
                finally:  # given up (timeout, drain, client gone): the thread stops at its next message
                    stop.set()
                return enc, views, answer_warnings(self.toy, images)
            finally:
                if (
                    budget.used >= TRIM_PIXELS
                ):  # the decoded images and the processor's buffers are garbage now
                    images = None
                    await asyncio.to_thread(release_memory)

    def _encode(self, request: Conversation, plan: RequestPlan) -> EncodedRequest:
        pair = self.runner.vl.pair
        enc = encode(request, pair.processor, pair.tokenizer, pair.cross_map)
        budget.check_fits(enc, plan.method, plan.cfg, self.runner.context_of(plan))
        return enc

    async def progress(self, p: Prepared) -> AsyncIterator[Progress]:
        """The runner's steps, each awaited against the request's deadline; leaving early aborts the request."""
        first = True
        late = f"the request ran over the server's timeout of {self.settings.request_timeout_s} s and was aborted"
        clock = self.metrics.vllm_latency.clock(
            p.started, len(R.prompt_ids(p.job, p.enc))
        )
        async with aclosing(self.runner.stream(p.enc, p.plan)) as steps:
            while True:
                try:
                    step = await self._within(anext(steps), p.deadline, late)
                except StopAsyncIteration:
                    return
                clock.step(len(step.token_ids))
                if step.row is not None:
                    clock.finished()
                if first and step.token_ids:
                    self.metrics.first_token.observe(time.monotonic() - p.started)
                    first = False
                yield step

    def finish(self, p: Prepared, step: Progress):
        """(row, usage, asymspec object) of the finished request, counted in the metrics."""
        row = R.finished_row(step.row)
        self.metrics.finished(p.job.method, row)
        self.metrics.latency.observe(time.monotonic() - p.started)
        usage = R.usage(p.job, p.enc, len(row.token_ids))
        asymspec = R.asymspec_object(self.runner.vl, p.job, p.enc, row, p.views)
        if p.warnings:
            asymspec["warnings"] = list(p.warnings)
        return row, usage, asymspec

    async def answer(self, p: Prepared, model: str):
        """The whole ChatCompletionResponse."""
        last = None
        async with self._counted(p), aclosing(self.progress(p)) as steps:
            async for last in steps:  # noqa: B007 (the last step is the answer)
                pass
            row, usage, asymspec = self.finish(p, last)
        logprobs = self.logprobs_content(p.job).push(R.checked_logprobs(p.job, row))
        return R.completion(
            p.job,
            model,
            R.answer_text(self.decode(p.job), row),
            row,
            usage,
            asymspec,
            logprobs,
            R.prompt_logprobs(self.runner.vl.pair.tokenizer, row),
            self.stop_reason(p.job, row),
            R.prompt_ids(p.job, p.enc),
        )

    def stop_reason(self, job: ChatJob, row) -> int | str | None:
        eos = self.runner.vl.pair.tokenizer.eos_token_id
        return R.stop_reason(job, row, self.decode(job), eos)

    def logprobs_content(self, job: ChatJob) -> R.LogprobsContent:
        return R.LogprobsContent(self.runner.vl.pair.tokenizer, job.skip_special_tokens)

    def decode(self, job: ChatJob):
        """token ids -> the answer's text: special tokens skipped unless the request said skip_special_tokens=false."""
        if job.skip_special_tokens:
            return self.runner.vl.decode
        return partial(self.runner.vl.pair.tokenizer.decode, skip_special_tokens=False)

    async def events(self, p: Prepared, model: str) -> AsyncIterator[str]:
        """Server-sent events: the role, then the text each step committed, then the finish reason with the
        asymspec object, the usage if asked, and [DONE]; an error after the first event ends the stream with
        an error event."""
        created, deltas, sent = (
            R.now(),
            R.streamed_text(self.decode(p.job), p.job.cfg),
            0,
        )
        logprobs = self.logprobs_content(p.job)
        so_far = (
            (lambda n: R.usage(p.job, p.enc, n))
            if p.job.continuous_usage
            else (lambda n: None)
        )
        yield R.role_chunk(p.job, model, created, R.prompt_ids(p.job, p.enc), so_far(0))
        try:
            async with self._counted(p), aclosing(self.progress(p)) as steps:
                async for step in steps:
                    if step.row is None:
                        text = deltas.push(step.token_ids)
                        yield R.chunk(
                            p.job,
                            model,
                            created,
                            content=text,
                            token_ids=step.token_ids[sent:],
                            logprobs=logprobs.push(step.logprobs),
                            usage_so_far=so_far(len(step.token_ids)),
                        )
                        sent = len(step.token_ids)
                        continue
                    row, usage, asymspec = self.finish(p, step)
                    yield R.chunk(
                        p.job,
                        model,
                        created,
                        content=deltas.end(R.answer_text(self.decode(p.job), row)),
                        token_ids=row.token_ids[sent:],
                        finish_reason=row.finish_reason,
                        stop=self.stop_reason(p.job, row),
                        asymspec=asymspec,
                        metrics=R.extra_metrics(row),
                        logprobs=logprobs.push(R.checked_logprobs(p.job, row)),
                        usage_so_far=usage if p.job.continuous_usage else None,
                    )
                    if p.job.include_usage:
                        yield R.usage_chunk(p.job, model, created, usage)
        except Exception as e:  # the status line is sent: the error travels as an event
            self.metrics.error(e)
            if not isinstance(e, AsymSpecError):
                logger.exception("a streamed request failed")
            yield f"data: {json.dumps(error_body(e))}\n\n"
        yield "data: [DONE]\n\n"

    @asynccontextmanager
    async def _counted(self, p: Prepared):
        """In flight while inside; a request left before it finished counts as "disconnected"."""
        self.metrics.in_flight.inc()
        finished = False
        try:
            yield
            finished = True
        finally:
            self.metrics.in_flight.dec()
            if not finished and sys.exc_info()[0] in (
                None,
                asyncio.CancelledError,
                GeneratorExit,
            ):
                self.metrics.ended(p.job.method, "disconnected")


def conversation_request(job: ChatJob, images: list, views: list[View]) -> Conversation:
    """The library's Conversation of a job: its turns, each image with its verifier view."""
    described = iter(zip(images, views))
    messages = []
    for turn in job.turns:
        parts = []
        for _ in turn.image_urls:
            image, view = next(described)
            parts.append(
                {
                    "type": "image",
                    "image": image,
                    "caption": view.caption,
                    "ocr": view.ocr,
                }
            )
        messages.append(
            {
                "role": turn.role,
                "content": parts + [{"type": "text", "text": turn.text}],
            }
        )
    return Conversation(messages)
