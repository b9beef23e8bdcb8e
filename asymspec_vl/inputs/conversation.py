"""A whole conversation as one request: system / user / assistant messages, images in any user turn, and its
three views. x_full: the drafter's chat template over the conversation, each image in place followed by its
verifier view text; x_comp: the verifier's template over the same conversation with each image replaced by its
view (caption + OCR); x_question: the drafter's template over the conversation with its images and none of the
view texts (the drafter alone). One user message with one image gives exactly Request's three prompts.

Messages (OpenAI's shape, with the image itself in place of a URL):
  {"role": "system" | "user" | "assistant", "content": "text" | [part, ...]}  ("developer" reads as "system")
  part: {"type": "text", "text": str} or {"type": "image", "image": path | PIL image | bytes,
         "caption": str, "ocr": str}  (images only in user turns; caption / ocr: the verifier's view, "" none)
A user turn reads its images first, then its text parts joined by newlines (as a single-turn request reads
its image, then its question). The conversation ends with a user turn (the answer follows it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import (
    EmptyQuestionError,
    InputError,
    InvalidImageError,
    MalformedConversationError,
    TooManyImagesError,
)
from ..core.limits import LIMITS
from .image_fit import Fit, original_size, processor_fit
from .images import load_image
from .prompts import (
    EncodedRequest,
    EncodedView,
    Prompts,
    check_reads_images,
    drafter_comp_view,
    encode_request,
    image_view,
    verifier_text,
    vision_inputs,
)
from .stop_signal import check_stop
from .user_text import check_text, encode_segments, sentinel, template_segments

ROLES = ("system", "user", "assistant")
ALIASES = {
    "developer": "system"
}  # OpenAI's newer name for the system message, as the server reads it


@dataclass
class Conversation:
    """A request of several turns (see the module docstring for the messages' shape)."""

    messages: list


@dataclass(frozen=True)
class Turn:
    """One checked message: its role, its text (parts joined by newlines), its images and their views."""

    role: str
    text: str
    images: tuple = ()  # the loaded images (PIL), user turns only
    views: tuple = ()  # per image (caption, ocr)


def checked_turns(conv: Conversation, fit: Fit | None = None) -> list[Turn]:
    """The conversation's turns, checked (MalformedConversationError / InvalidTextError / ... naming the
    message); images are loaded and validated here (fit: the drafter processor's size rule, image_fit.py)."""
    messages = conv.messages
    if not isinstance(messages, (list, tuple)) or not messages:
        raise MalformedConversationError(
            "a conversation needs a non-empty list of messages"
        )
    check_image_count(messages)  # before any image loads
    turns = []
    for i, m in enumerate(messages):
        check_stop()  # a request given up stops here (stop_signal.py)
        turns.append(_turn(i, m, fit))
    if turns[-1].role != "user":
        raise MalformedConversationError(
            f"the conversation must end with a user message (the answer follows it); "
            f"the last is {turns[-1].role!r}"
        )
    if not turns[-1].text.strip():
        raise EmptyQuestionError(
            "the question is empty: the last user message has no text"
        )
    return turns


def check_image_count(messages) -> None:
    """TooManyImagesError when the messages' image parts are more than one request may hold (the vLLM drafter
    engine's limit_mm_per_prompt, held on both backends so a request is answered alike on either)."""
    limit = LIMITS.images_per_request
    n = sum(
        isinstance(p, dict) and p.get("type") == "image"
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), (list, tuple))
        for p in m["content"]
    )
    if n > limit:
        raise TooManyImagesError(
            f"the conversation holds {n} images; a request holds at most {limit} "
            "(LIMITS.images_per_request, the drafter engine's images per prompt)"
        )


def _turn(i: int, message, fit: Fit | None = None) -> Turn:
    if not isinstance(message, dict) or message.get("role") not in (*ROLES, *ALIASES):
        role = (
            message.get("role") if isinstance(message, dict) else type(message).__name__
        )
        raise MalformedConversationError(
            f"messages[{i}] must be an object with a role in {ROLES} (or 'developer', "
            f"read as system), got {role!r}"
        )
    role, content = (
        ALIASES.get(message["role"], message["role"]),
        message.get("content"),
    )
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, (list, tuple)):
        raise MalformedConversationError(
            f"messages[{i}].content must be a string or a list of parts, got "
            f"{type(content).__name__}"
        )
    texts, images, views = [], [], []
    for j, part in enumerate(parts):
        where = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(check_text(f"{where}.text", part.get("text")))
        elif kind == "image":
            if role != "user":
                raise InvalidImageError(
                    f"{where}: an image in a {role} message; images go in user messages"
                )
            images.append(load_image(part.get("image"), fit=fit))
            views.append(
                (
                    check_text(f"{where}.caption", part.get("caption"), optional=True)
                    or "",
                    check_text(f"{where}.ocr", part.get("ocr"), optional=True) or "",
                )
            )
        else:
            raise MalformedConversationError(
                f"{where} must be a text or image part, got {kind or part!r}"
            )
    return Turn(role, "\n".join(texts), tuple(images), tuple(views))


def view_text(text: str, views: tuple) -> str:
    """A user turn as the verifier reads it: each image's caption and OCR text, then the turn's text. One
    image: prompts.verifier_text's blocks; several: the same blocks numbered."""
    if len(views) == 1:
        return verifier_text(text, *views[0])
    blocks = []
    for n, (caption, ocr) in enumerate(views, 1):
        if caption.strip():
            blocks.append(f"Image {n} description:\n{caption.strip()}")
        if ocr.strip():
            blocks.append(f"Text in image {n} (OCR):\n{ocr.strip()}")
    return "\n\n".join(blocks + [text.strip()])


def framed_segments(
    turns: list[Turn], owner, images: bool, with_views: bool
) -> list[str]:
    """One view's [template, text, template, ..., template]: user texts (with their views or not) and the other
    turns' texts read as ordinary text; image placeholders in place where `images`."""
    messages, texts = [], []
    for t in turns:
        check_stop()  # a request given up stops here (stop_signal.py)
        text = (
            (view_text(t.text, t.views) if with_views else t.text.strip())
            if t.role == "user"
            else t.text
        )
        content = sentinel(len(texts))
        if images and t.role == "user":
            content = [{"type": "image"} for _ in t.images] + [
                {"type": "text", "text": content}
            ]
        messages.append({"role": t.role, "content": content})
        texts.append(text)
    segments = template_segments(owner, messages, len(texts))
    return [texts[s] if k % 2 else s for k, s in enumerate(segments)]


def encode_conversation(conv: Conversation, processor, tokenizer, drafter_comp=None):
    """The EncodedRequest of a conversation: x_full, x_comp, x_question (prompts.encode_request's views);
    drafter_comp (a cross-family pair's VocabMap): the drafter's x_comp (prompts.drafter_comp_view)."""
    if not isinstance(conv, Conversation):
        raise InputError(
            f"a conversation must be an asymspec_vl.Conversation, got {type(conv).__name__}"
        )
    turns = checked_turns(conv, processor_fit(processor))
    if any(t.images for t in turns):
        check_reads_images(processor)
    full = framed_segments(turns, processor, images=True, with_views=True)
    comp = framed_segments(turns, tokenizer, images=False, with_views=True)
    question = framed_segments(turns, processor, images=True, with_views=False)
    prompts = Prompts(
        x_full="".join(full), x_comp="".join(comp), x_question="".join(question)
    )
    comp_view = EncodedView(encode_segments(tokenizer, comp))
    drafter_tok = getattr(processor, "tokenizer", processor)
    d_comp = (
        drafter_comp_view(
            comp_view.ids,
            drafter_comp,
            lambda: EncodedView(
                encode_segments(
                    drafter_tok,
                    framed_segments(turns, processor, images=False, with_views=True),
                )
            ),
        )
        if drafter_comp is not None
        else None
    )
    all_images = [im for t in turns for im in t.images]
    if not all_images:
        return EncodedRequest(
            prompts,
            EncodedView(encode_segments(drafter_tok, full)),
            comp_view,
            EncodedView(encode_segments(drafter_tok, question)),
            drafter_comp=d_comp,
        )
    pixel_values, grid = vision_inputs(processor, all_images)
    return EncodedRequest(
        prompts,
        image_view(processor, full, pixel_values, grid),
        comp_view,
        image_view(processor, question, pixel_values, grid),
        meta={"image_sizes": [original_size(im) for im in all_images]},
        drafter_comp=d_comp,
    )


def encode(req, processor, tokenizer, drafter_comp=None) -> EncodedRequest:
    """A Request (prompts.encode_request) or a Conversation (encode_conversation) -> its EncodedRequest
    (drafter_comp: a cross-family pair's VocabMap, prompts.drafter_comp_view)."""
    if isinstance(req, Conversation):
        return encode_conversation(req, processor, tokenizer, drafter_comp)
    return encode_request(req, processor, tokenizer, drafter_comp)
