"""User text (question, caption, OCR, context) is checked and always tokenized as ordinary text.

Why separate tokenization and not escaping: a prompt is the chat template's own pieces around the user's
message. Tokenizing the whole string would read a "<|im_end|>" or "<|image_pad|>" typed by a user (or found
by OCR in an image) as the control token itself: it could end the turn, inject a role or break the image
placeholders. Escaping the text (a zero-width space inside "<|", say) would stop that but change the
characters the model reads. Instead the template is rendered around a sentinel, split there, and the pieces
are tokenized apart: the template pieces with their special tokens, the user text with a copy of the
tokenizer that has no added vocabulary, so every special-token string in it becomes the byte-level tokens of
its characters, as any other text does. The user's exact characters reach the model, and text without such
strings gives exactly the ids of tokenizing the whole prompt (the pieces meet at pre-token boundaries: a
newline or a special token; tests/inputs/test_user_text.py checks it).
"""

from __future__ import annotations

import json
from functools import lru_cache

from ..core.errors import ChatTemplateError, InvalidTextError

SENTINEL = "\x00asymspec-user-text\x00"  # stands for the user's message while the template renders


def check_text(name: str, value, optional: bool = False) -> str | None:
    """`value` if it is a str of valid Unicode; None passes when `optional`. Raises InvalidTextError naming
    the argument."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        allowed = "a str or None" if optional else "a str"
        raise InvalidTextError(f"{name} must be {allowed}, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidTextError(
            f"{name} holds {value[e.start]!r} at position {e.start}: a lone surrogate is "
            "not valid Unicode text (decode the source bytes as UTF-8)"
        ) from None
    return value


def template_pieces(
    template_owner, content, thinking_off: bool = True
) -> tuple[str, str]:
    """The chat-template text before and after the user message (`content` holds SENTINEL where it goes)."""
    messages = [{"role": "user", "content": content}]
    kwargs = {"enable_thinking": False} if thinking_off else {}
    rendered = template_owner.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **kwargs
    )
    if rendered.count(SENTINEL) != 1:
        raise ChatTemplateError(
            f"the chat template of {type(template_owner).__name__} does not place the user "
            "message verbatim exactly once; AsymSpec needs a ChatML-style template"
        )
    before, after = rendered.split(SENTINEL)
    return before, after


def template_segments(
    template_owner, messages: list[dict], n: int, thinking_off: bool = True
) -> list:
    """A whole conversation rendered by the chat template, split at its n texts: [template, None, template, None,
    ..., template] (None where text i goes). Text i is marked `sentinel(i)` in `messages`, in order."""
    kwargs = {"enable_thinking": False} if thinking_off else {}
    rendered = template_owner.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **kwargs
    )
    marks = [sentinel(i) for i in range(n)]
    positions = [rendered.find(m) for m in marks]
    if (
        any(rendered.count(m) != 1 for m in marks)
        or positions != sorted(positions)
        or rendered.count("\x00asymspec-user-text") != n
    ):
        raise ChatTemplateError(
            f"the chat template of {type(template_owner).__name__} does not place each "
            "message's text verbatim once, in order; AsymSpec needs a ChatML-style template"
        )
    segments, rest = [], rendered
    for m in marks:
        before, rest = rest.split(m)
        segments.append(before)
        segments.append(None)  # filled by the caller with the message's text
    return segments + [rest]


def sentinel(i: int) -> str:
    """The mark of text i of a conversation while its template renders."""
    return f"\x00asymspec-user-text-{i}\x00"


def encode_pieces(tokenizer, view) -> list[int]:
    """Ids of a framed view (view.before + view.text + view.after): special tokens read in the template pieces
    only."""
    return encode_segments(tokenizer, (view.before, view.text, view.after))


def encode_segments(tokenizer, segments) -> list[int]:
    """Ids of [template, text, template, text, ..., template]: special tokens read in the template pieces only."""
    ids = []
    for i, piece in enumerate(segments):
        ids += (
            text_ids(tokenizer, piece)
            if i % 2
            else tokenizer(piece, add_special_tokens=False)["input_ids"]
        )
    return ids


def text_ids(tokenizer, text: str) -> list[int]:
    """Ids of `text` as ordinary text: no added or special token is matched in it."""
    return _plain_tokenizer(tokenizer).encode(text, add_special_tokens=False).ids


@lru_cache(maxsize=8)
def _plain_tokenizer(tokenizer):
    """The fast tokenizer's backend without its added vocabulary (same normalizer, pre-tokenizer, BPE)."""
    from tokenizers import Tokenizer  # lazy: loads tokenizers

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))
