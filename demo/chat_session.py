"""The page's chat: a conversation about one image, each reply decoded by the library's generate_chat with one
method and streamed as a stream sends it (core/stop_strings.StreamedText), without Gradio."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from asymspec_vl.core.errors import ConfigError, EmptyQuestionError
from asymspec_vl.core.stop_strings import StreamedText

from .board import ENDINGS
from .streaming import Cancelled, Snapshot, stream_generate

METHODS = {
    "asymspec": "AsymSpec",
    "floor": "Floor (the verifier alone)",
    "drafter": "VL drafter alone",
}
# turns: the conversation as the chat shows it, [{"role": "user" | "assistant", "content": str}, ...]
Turns = list[dict]


def with_question(turns: Turns, question) -> Turns:
    """The conversation with the user's new message (EmptyQuestionError for no text)."""
    if not isinstance(question, str) or not question.strip():
        raise EmptyQuestionError(
            "The message is empty: type a question about the image."
        )
    return [*turns, {"role": "user", "content": question}]


def for_retry(turns: Turns) -> Turns:
    """The conversation without its last reply, to answer its last user message again."""
    kept = list(turns)
    while kept and kept[-1]["role"] == "assistant":
        kept.pop()
    if not kept:
        raise EmptyQuestionError("There is nothing to retry: ask a question first.")
    return kept


def chat_messages(turns: Turns, image, caption: str, ocr: str) -> list[dict]:
    """generate_chat's messages: the image (with the verifier's view of it: caption, OCR text) in the first user
    message, every turn's text in order (inputs/conversation.py)."""
    messages, placed = [], image is None
    for turn in turns:
        content = turn["content"]
        if turn["role"] == "user" and not placed:
            content = [
                {
                    "type": "image",
                    "image": image,
                    "caption": caption or "",
                    "ocr": ocr or "",
                },
                {"type": "text", "text": content},
            ]
            placed = True
        messages.append({"role": turn["role"], "content": content})
    return messages


def reply(
    service,
    turns: Turns,
    image,
    caption: str,
    ocr: str,
    method: str,
    cfg,
    stop: threading.Event | None = None,
) -> Iterator[tuple[Turns, str]]:
    """Stream the reply to the conversation's last user message: (the turns with the reply so far, its status:
    "decoding…", "done: ..." or "stopped"). The image (any uploads.as_upload input) is checked and decoded by
    the service first. The reply's text grows as a stream sends it and ends as the result's text."""
    if method not in METHODS:
        raise ConfigError(
            f"method={method!r} is invalid: expected one of {', '.join(METHODS)}"
        )
    if not turns or turns[-1]["role"] != "user":
        raise EmptyQuestionError("There is no question: type a message.")
    decoded = service.load(image) if image is not None else None
    messages = chat_messages(turns, decoded, caption, ocr)
    text = StreamedText(
        service.vl.decode, cfg.stop, cfg.include_stop_str_in_output, cfg.min_tokens
    )
    answer = {"role": "assistant", "content": ""}
    try:
        for item in stream_generate(
            service.vl,
            service.lock,
            stop,
            entry="generate_chat",
            messages=messages,
            method=method,
            config=cfg,
        ):
            if isinstance(item, Snapshot):
                answer["content"] += text.push(item.token_ids)
                yield [*turns, dict(answer)], "decoding…"
            else:
                answer["content"] += text.end(item.text)
                ending = ENDINGS.get(item.finish_reason, item.finish_reason)
                yield (
                    [*turns, dict(answer)],
                    f"done: {ending} ({len(item.token_ids)} tokens, {METHODS[method]})",
                )
    except Cancelled:
        yield [*turns, dict(answer)], "stopped"
