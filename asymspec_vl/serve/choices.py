"""A request with n > 1 choices: n requests over one prepared conversation (the images fetched, viewed and encoded
once), choice i seeded seed + i as vLLM seeds a parallel-sampling request's children
(vllm/v1/engine/parallel_sampling.py; unseeded: each its own draws; greedy: n equal answers, as in vLLM).
Answered together as one chat.completion (choices indexed 0..n-1; usage: the prompt once, the completion tokens
summed, as vLLM counts them; `asymspec` the first choice's, with every choice's under asymspec.choices) or as one
stream whose chunks carry their choice's index, then one usage chunk if asked, then [DONE]."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator

from . import responses as R
from .chat import ChatService, Prepared

DONE = "data: [DONE]\n\n"


def choices_of(p: Prepared) -> list[Prepared]:
    """The n prepared requests of p (one when n is 1)."""
    job = p.job
    if job.n == 1:
        return [p]
    out = []
    for i in range(job.n):
        plan = p.plan if job.cfg.seed is None else p.plan.with_seed(job.cfg.seed + i)
        # each choice streams its usage chunk: events() reads it and sends one with the sum instead
        out.append(
            dataclasses.replace(
                p,
                job=dataclasses.replace(
                    job, cfg=plan.cfg, choice=i, include_usage=job.stream
                ),
                plan=plan,
            )
        )
    return out


async def answer(service: ChatService, p: Prepared, model: str):
    """The ChatCompletionResponse of every choice."""
    parts = choices_of(p)
    responses = await asyncio.gather(*(service.answer(c, model) for c in parts))
    if len(responses) == 1:
        return responses[0]
    first = responses[0]
    completion = sum(r.usage.completion_tokens for r in responses)
    first.usage.completion_tokens, first.usage.total_tokens = (
        completion,
        first.usage.prompt_tokens + completion,
    )
    first.choices = [r.choices[0] for r in responses]
    first.asymspec = {**first.asymspec, "choices": [r.asymspec for r in responses]}
    return first


async def events(service: ChatService, p: Prepared, model: str) -> AsyncIterator[str]:
    """Server-sent events of every choice, interleaved as their steps arrive; one usage chunk (if asked) and one
    [DONE] at the end."""
    parts = choices_of(p)
    if len(parts) == 1:
        async for event in service.events(p, model):
            yield event
        return
    queue: asyncio.Queue = asyncio.Queue()
    completion = [0] * len(parts)

    async def pump(i: int, c: Prepared) -> None:
        try:
            async for event in service.events(c, model):
                await queue.put((i, event))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.create_task(pump(i, c)) for i, c in enumerate(parts)]
    try:
        left = len(tasks)
        while left:
            i, event = await queue.get()
            if event is None:
                left -= 1
            elif event != DONE:
                usage = _usage_of(event)
                if usage is None:
                    yield event
                else:
                    completion[i] = usage["completion_tokens"]
        if p.job.include_usage:
            usage = R.usage(p.job, p.enc, sum(completion))
            yield R.usage_chunk(p.job, model, R.now(), usage)
        yield DONE
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _usage_of(event: str) -> dict | None:
    """The usage of a choice's usage chunk (no choices); None for any other event."""
    if not event.startswith("data: {") or '"choices":[]' not in event:
        return None
    body = json.loads(event[len("data: ") :])
    return body.get("usage") if body.get("choices") == [] else None
