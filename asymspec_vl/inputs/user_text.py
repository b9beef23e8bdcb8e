"""User text (question, caption, OCR, context) is checked and always tokenized as ordinary text.

Why separate tokenization and not escaping: a prompt is the chat template's own pieces around the user's
message. Tokenizing the whole string would read a "<|im_end|>" or "<|image_pad|>" typed by a user (or found
by OCR in an image) as the control token itself: it could end the turn, inject a role or break the image
placeholders. Escaping the text (a zero-width space inside "<|", say) would stop that but change the
characters the model reads. Instead the template is rendered around a sentinel, split there, and the pieces
are tokenized apart: the template's runs of added tokens with them, the user text (with the template text
around it up to the nearest added token) with a copy of the tokenizer that has no added vocabulary, so every
special-token string in it becomes the byte-level tokens of its characters, as any other text does. The user's
exact characters reach the model, and text without such strings gives exactly the ids of tokenizing the whole
prompt (the parts meet at added tokens, where the whole string's tokenization cuts too; tests/inputs/
test_user_text.py checks it, tests/real_shapes/test_prompt_pieces.py on the real families' templates).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from ..core.errors import ChatTemplateError, InvalidTextError
from .stop_signal import check_stop

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
    """A whole conversation rendered by the chat template, split at its n texts: [template, i, template, j, ...,
    template] (the index of the text that goes there, in the order the template places them: Mistral's puts the
    system text in the last user turn). Text i is marked `sentinel(i)` in `messages`."""
    kwargs = {"enable_thinking": False} if thinking_off else {}
    rendered = template_owner.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **kwargs
    )
    # one pass over the rendered text (linear: a conversation of thousands of turns must not cost their square)
    cuts = list(SENTINELS.finditer(rendered))
    placed = [int(m.group(1)) for m in cuts]
    if (
        sorted(placed) != list(range(n))
        or rendered.count("\x00asymspec-user-text") != n
    ):
        raise ChatTemplateError(
            f"the chat template of {type(template_owner).__name__} does not place each "
            "message's text verbatim once; AsymSpec needs a template that does (as ChatML's)"
        )
    segments, start = [], 0
    for m, i in zip(cuts, placed):
        check_stop()
        segments.append(rendered[start : m.start()])
        segments.append(i)  # filled by the caller with text i
        start = m.end()
    return segments + [rendered[start:]]


def sentinel(i: int) -> str:
    """The mark of text i of a conversation while its template renders."""
    return f"\x00asymspec-user-text-{i}\x00"


SENTINELS = re.compile(
    "\x00asymspec-user-text-([0-9]+)\x00"
)  # sentinel(i), i in its group


def encode_pieces(tokenizer, view) -> list[int]:
    """Ids of a framed view (view.before + view.text + view.after): special tokens read in the template pieces
    only."""
    return encode_segments(tokenizer, (view.before, view.text, view.after))


def encode_segments(tokenizer, segments) -> list[int]:
    """Ids of [template, text, template, text, ..., template]: added and special tokens read in the template
    pieces only. The prompt is cut where the whole string's tokenization cuts it, at the template's added tokens:
    the template text around a user text up to the nearest added token goes with that text (Tekken reads ".\n\n"
    as one piece, SentencePiece " What" as "▁What"), and the runs between are the template's own."""
    plain, runs = (
        [""],
        [],
    )  # plain[n]: text and template text without added tokens; runs[n] after it
    for k, piece in enumerate(segments):
        check_stop()  # once per message: a request given up stops here (stop_signal.py)
        span = None if k % 2 else _added_span(tokenizer, piece)
        if span is None:
            plain[-1] += piece
            continue
        plain[-1] += piece[: span[0]]
        runs.append(piece[span[0] : span[1]])
        plain.append(piece[span[1] :])
    ids = []
    for n, part in enumerate(plain):
        # the whole string's first part alone may get SentencePiece's "▁" before its first word
        ids += (
            _backend(tokenizer, added=False, prepend=n == 0)
            .encode(part, add_special_tokens=False)
            .ids
        )
        if n < len(runs):
            ids += tokenizer(runs[n], add_special_tokens=False)["input_ids"]
    return ids


def _added_span(tokenizer, piece: str) -> tuple[int, int] | None:
    """(start, end) of `piece` from its first added token's start to its last one's end; None: it holds none."""
    if not piece:
        return None
    enc = tokenizer.backend_tokenizer.encode(piece, add_special_tokens=False)
    added = _added_ids(tokenizer)
    spans = [o for i, o in zip(enc.ids, enc.offsets) if i in added]
    return (spans[0][0], spans[-1][1]) if spans else None


@lru_cache(maxsize=16)
def _added_ids(tokenizer) -> frozenset:
    return frozenset(tokenizer.added_tokens_decoder)


def text_ids(tokenizer, text: str) -> list[int]:
    """Ids of `text` as ordinary text: no added or special token is matched in it."""
    return _backend(tokenizer, added=False).encode(text, add_special_tokens=False).ids


def _prepending_metaspace(spec: dict) -> dict | None:
    """The Metaspace pre-tokenizer that writes "▁" before the string's first word only (prepend_scheme "first":
    SentencePiece's dummy prefix as transformers converts it with legacy=False, Mistral v3's)."""
    pre = spec.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Metaspace" and p.get("prepend_scheme") == "first":
            return p
    return None


@lru_cache(maxsize=16)
def _backend(tokenizer, added: bool = True, prepend: bool = True):
    """The fast tokenizer's backend (added=False: without its added vocabulary; prepend=False: its Metaspace
    pre-tokenizer writes no "▁" before the first word); same normalizer, pre-tokenizer, BPE otherwise."""
    from tokenizers import Tokenizer  # lazy: loads tokenizers

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    if not added:
        spec["added_tokens"] = []
    metaspace = _prepending_metaspace(spec)
    if not prepend:
        if metaspace is None:
            return _backend(tokenizer, added, True)
        metaspace["prepend_scheme"] = "never"
    return Tokenizer.from_str(json.dumps(spec))
