"""The OpenAI objects the server answers with (vLLM's ChatCompletionResponse and chunk classes), their `usage`,
and the `asymspec` object beside them: the method, its statistics (acceptance rate, mean accepted length, the
δ-fused count, ...), where the verifier's view came from, and when asked the per-token trace and the prompts."""

from __future__ import annotations

import time

from ..api import TokenPieces, trace_pieces
from ..core.errors import GrammarDeadEndError
from ..core.loop import RowOutput
from ..core.methods import method as method_named
from ..core.stop_strings import StreamedText
from ..core.trace import FUSED
from ..inputs.prompts import EncodedRequest
from .captioning import View
from .http_errors import GenerationFailedError
from .translate import ChatJob


def streamed_text(decode, cfg) -> StreamedText:
    """The answer's text as its tokens arrive (core/stop_strings.py, vLLM's stop buffer): push(token_ids) per
    step, end(final text); the deltas join to the final text and never carry text a stop string cuts."""
    return StreamedText(
        decode, cfg.stop, cfg.include_stop_str_in_output, cfg.min_tokens
    )


def answer_text(decode, row: RowOutput) -> str:
    """The answer's text: as a stop string cut it (the loop's or vLLM's detokenizer's cut), else decoded."""
    return row.text if row.text is not None else decode(row.token_ids)


DEAD_END = f"{GrammarDeadEndError.__name__}: "  # how a dead end's error travels in row.error (its class, then ": ")


def finished_row(row: RowOutput) -> RowOutput:
    """The row of a finished request; GenerationFailedError (500) with the engine's message when the run failed.
    A structured output's dead end is the request's, not the server's: GrammarDeadEndError (400, which OpenAI
    clients do not retry, where they retry a 500) naming the output position (docs/serve.md says why not vLLM's
    way: it goes on generating past the grammar)."""
    if row.finish_reason == "error" and DEAD_END in row.error:
        detail = row.error.split(DEAD_END, 1)[1].split(" The answer so far", 1)[0]
        raise GrammarDeadEndError(
            f"{detail} (a streamed answer keeps the {len(row.token_ids)} tokens sent before it)"
        )
    if row.finish_reason == "error":
        raise GenerationFailedError(
            f"the model run failed on this request: {row.error}"
        )
    return row


def prompt_ids(job: ChatJob, enc: EncodedRequest) -> list[int]:
    """The prompt the method's engine reads (x_comp; x_question for the drafter alone): usage's prompt tokens,
    and vLLM's prompt_token_ids with return_token_ids."""
    return list(enc.view(method_named(job.method).scoring[0].view).ids)


def usage(job: ChatJob, enc: EncodedRequest, num_tokens: int):
    from vllm.entrypoints.openai.engine.protocol import UsageInfo  # lazy: loads vLLM

    prompt = len(prompt_ids(job, enc))
    return UsageInfo(
        prompt_tokens=prompt,
        completion_tokens=num_tokens,
        total_tokens=prompt + num_tokens,
    )


def asymspec_object(
    vl, job: ChatJob, enc: EncodedRequest, row: RowOutput, views: list[View]
) -> dict:
    """The statistics beside the answer; `view` is the one image's sources, `views` every image's in order. The
    method and config are the plan the runner ran, carried back on the row."""
    config = {
        k: v
        for k, v in row.plan.cfg.to_dict().items()
        if k not in ("max_new_tokens", "stop_token_ids", "structured_output")
    }
    out = {
        "method": row.plan.method.name,
        **row.stats.to_dict(),
        "fused": row.sources.count(FUSED),
        "config": config,
        "views": [v.sources for v in views],
        "vocabulary": vl.pair.vocabulary.to_dict(),
    }
    if len(views) == 1:
        out["view"] = views[0].sources
    if job.return_trace:
        pieces = trace_pieces(vl.pair.tokenizer, row.token_ids)
        out["trace"] = [
            {"token_id": i, "text": p, "source": s}
            for i, p, s in zip(row.token_ids, pieces, row.sources)
        ]
    if job.return_prompts:
        out["prompts"] = dict(vars(enc.prompts))
    return out


def pair_card(vl) -> dict:
    """/v1/models' `asymspec` object of a loaded server: the drafter, the verifier and what their vocabularies
    share (pair/shared_vocab.py)."""
    return {
        "drafter": vl.names["drafter"],
        "verifier": vl.names["verifier"],
        "vocabulary": vl.pair.vocabulary.to_dict(),
    }


def speculative_decoding(row: RowOutput) -> dict | None:
    """The request's speculative-decoding summary in vLLM's terms (None where nothing was drafted): a draft is a
    step that drafted; mean_acceptance_length = 1 + accepted / drafts (the bonus token counted, as vLLM counts it);
    acceptance_histogram[i] = drafts with exactly i drafts accepted (i = 0..K); plus the δ-fused tokens."""
    s = row.stats
    if not s.drafted:
        return None
    drafts, at = s.steps, list(s.accepted_at)
    histogram = [drafts - (at[0] if at else 0)] + [
        a - b for a, b in zip(at, at[1:] + [0])
    ]
    return {
        "num_spec_steps": drafts,
        "num_draft_tokens": s.drafted,
        "num_accepted_draft_tokens": s.accepted,
        "mean_acceptance_length": 1 + s.accepted / drafts,
        "draft_acceptance_rate": s.accepted / s.drafted,
        "acceptance_histogram": histogram,
        "num_accepted_tokens_per_pos": at,
        "num_fused_tokens": row.sources.count(FUSED),
    }


def extra_metrics(row: RowOutput) -> dict:
    """The response's `metrics` object (later vLLM releases' shape), where there is something to say."""
    spec = speculative_decoding(row)
    return {"metrics": {"speculative_decoding": spec}} if spec is not None else {}


LOWEST_LOGPROB = -9999.0  # vLLM's floor for a logprob in a response (JSON has no -inf)


class LogprobsContent:
    """OpenAI's choices[i].logprobs of the tokens as they arrive: per token {token, logprob, bytes, top_logprobs:
    [{token, logprob, bytes}], asymspec_distribution}. `token` is the text the token adds to the answer (as the
    trace's: the content entries' tokens join to the answer's text; special tokens the text skips add ""), its bytes
    that text's UTF-8; an alternative's token is its own decoded text. asymspec_distribution names the distribution
    the token and its alternatives are under (t, q, a, fused, contrastive: asymspec_vl/core/logprobs.py)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer, self.skip_special_tokens, self.pieces, self.sent = (
            tokenizer,
            skip_special_tokens,
            None,
            0,
        )

    def push(self, logprobs: list | None):
        """The logprobs object of the tokens after those already pushed (None when none were asked)."""
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionLogProbs,
        )  # lazy: loads vLLM

        if (
            logprobs is None or len(logprobs) <= self.sent
        ):  # none asked, or no new token: no object (never [])
            return None
        new, self.sent = logprobs[self.sent :], len(logprobs)
        if (
            self.pieces is None
        ):  # made on the first logprobs: a request that asks none reads no tokenizer
            self.pieces = TokenPieces(self.tokenizer, self.skip_special_tokens)
        pieces = self.pieces.push([x.token_id for x in new])
        return ChatCompletionLogProbs(
            content=[self._entry(x, p) for x, p in zip(new, pieces)]
        )

    def _entry(self, x, piece: str):
        # lazy: loads vLLM
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionLogProb,
            ChatCompletionLogProbsContent,
        )

        top = []
        for i, lp in x.top:
            text = self.tokenizer.decode([i])
            top.append(
                ChatCompletionLogProb(
                    token=text,
                    logprob=max(lp, LOWEST_LOGPROB),
                    bytes=list(text.encode("utf-8", errors="replace")),
                )
            )
        return ChatCompletionLogProbsContent(
            token=piece,
            logprob=max(x.logprob, LOWEST_LOGPROB),
            bytes=list(piece.encode("utf-8")),
            top_logprobs=top,
            asymspec_distribution=x.distribution,
        )


def checked_logprobs(job: ChatJob, row: RowOutput) -> list | None:
    """The finished row's logprobs when the request asked for them; GenerationFailedError (500) if they are missing
    (never an empty list)."""
    if job.cfg.logprobs is None:
        return None
    if row.logprobs is None or len(row.logprobs) != len(row.token_ids):
        raise GenerationFailedError(
            f"the decoding returned {len(row.logprobs or [])} logprobs for "
            f"{len(row.token_ids)} tokens"
        )
    return row.logprobs


def prompt_logprobs(tokenizer, row: RowOutput) -> list | None:
    """vLLM's prompt_logprobs of a response: None, then per prompt token {token id: Logprob(logprob, rank,
    decoded_token)} of the token and its top alternatives (None when not asked)."""
    if row.prompt_logprobs is None:
        return None
    from vllm.logprobs import Logprob  # lazy: loads vLLM
    from vllm.tokenizers.detokenizer_utils import (
        convert_ids_list_to_tokens,
    )  # lazy: loads vLLM

    def entry(x) -> dict:
        ids = [x.token_id] + [i for i, _ in x.top]
        ranks = {x.token_id: x.rank, **{i: r for r, (i, _) in enumerate(x.top, 1)}}
        values = {x.token_id: x.logprob, **dict(x.top)}
        return {
            i: Logprob(values[i], ranks[i], piece)
            for i, piece in zip(ids, convert_ids_list_to_tokens(tokenizer, ids))
        }

    return [None if x is None else entry(x) for x in row.prompt_logprobs]


def stop_reason(job: ChatJob, row: RowOutput, decode, eos_id: int | None):
    """vLLM's stop_reason of a finished row: the stop string that cut the answer, or the stop token that ended it;
    None when the model's EOS (the tokenizer's eos_token_id) or the budget ended it."""
    if row.finish_reason != "stop":
        return None
    if row.text is None:
        last = row.token_ids[-1] if row.token_ids else None
        return None if last == eos_id else last
    cfg, text = job.cfg, row.text
    after = decode(row.token_ids)[len(text) :]  # the text the cut left out
    for s in cfg.stop:  # in the request's order, as vLLM's check_stop_strings looks
        if text.endswith(s) if cfg.include_stop_str_in_output else after.startswith(s):
            return s
    return None


def completion(
    job: ChatJob,
    model: str,
    text: str,
    row: RowOutput,
    usage_info,
    asymspec: dict,
    logprobs=None,
    prompt_logprobs=None,
    stop: int | str | None = None,
    prompt: list[int] | None = None,
):
    """The chat.completion, every field vLLM's ChatCompletionResponse has (None ones sent as null, as vLLM's
    model_dump() sends them); token_ids and prompt_token_ids with return_token_ids."""
    # lazy: loads vLLM
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponse,
        ChatCompletionResponseChoice,
        ChatMessage,
    )

    choice = ChatCompletionResponseChoice(
        index=job.choice,
        message=ChatMessage(role="assistant", content=text),
        finish_reason=row.finish_reason,
        stop_reason=stop,
        logprobs=logprobs,
        token_ids=row.token_ids if job.return_token_ids else None,
    )
    return ChatCompletionResponse(
        id=job.response_id,
        model=model,
        choices=[choice],
        usage=usage_info,
        asymspec=asymspec,
        prompt_logprobs=prompt_logprobs,
        prompt_token_ids=prompt if job.return_token_ids else None,
        **extra_metrics(row),
    )


def role_chunk(
    job: ChatJob, model: str, created: int, prompt: list[int], usage_so_far=None
) -> str:
    """The first event of a streamed choice, as vLLM's serving_chat sends it: the role and "" (logprobs and
    finish_reason null), prompt_token_ids (null unless return_token_ids), usage with continuous_usage_stats."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice,
    )  # lazy: loads vLLM
    from vllm.entrypoints.openai.engine.protocol import DeltaMessage  # lazy: loads vLLM

    choice = ChatCompletionResponseStreamChoice(
        index=job.choice,
        delta=DeltaMessage(role="assistant", content=""),
        logprobs=None,
        finish_reason=None,
    )
    ids = prompt if job.return_token_ids else None
    return _event(job, model, created, [choice], usage_so_far, prompt_token_ids=ids)


def chunk(
    job: ChatJob,
    model: str,
    created: int,
    content: str,
    token_ids: list[int],
    finish_reason: str | None = None,
    stop: int | str | None = None,
    asymspec: dict | None = None,
    metrics: dict | None = None,
    logprobs=None,
    usage_so_far=None,
) -> str:
    """A step's event, as vLLM's serving_chat sends it: the text it added (the last event, the one with the
    finish_reason and stop_reason, carries the last step's text), logprobs (null when not asked), token_ids (null
    unless return_token_ids); usage_so_far (continuous_usage_stats) rides with it."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice,
    )  # lazy: loads vLLM
    from vllm.entrypoints.openai.engine.protocol import DeltaMessage  # lazy: loads vLLM

    fields = {"stop_reason": stop} if finish_reason is not None else {}
    choice = ChatCompletionResponseStreamChoice(
        index=job.choice,
        delta=DeltaMessage(content=content),
        logprobs=logprobs,
        finish_reason=finish_reason,
        token_ids=token_ids if job.return_token_ids else None,
        **fields,
    )
    extra = {"asymspec": asymspec} if asymspec is not None else {}
    return _event(
        job, model, created, [choice], usage_so_far, **extra, **(metrics or {})
    )


def usage_chunk(job: ChatJob, model: str, created: int, usage_info) -> str:
    """The usage event (stream_options.include_usage): no choices, None fields left out, as vLLM sends it."""
    return _event(job, model, created, [], usage_info, exclude_none=True)


def _event(
    job, model, created, choices, usage_info, exclude_none=False, **fields
) -> str:
    """One server-sent event: the fields vLLM sets (exclude_unset), usage only where there is one."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionStreamResponse,
    )  # lazy: loads vLLM

    if usage_info is not None:
        fields["usage"] = usage_info
    event = ChatCompletionStreamResponse(
        id=job.response_id,
        object="chat.completion.chunk",
        created=created,
        model=model,
        choices=choices,
        **fields,
    )
    body = event.model_dump_json(exclude_unset=True, exclude_none=exclude_none)
    return f"data: {body}\n\n"


def now() -> int:
    return int(time.time())
