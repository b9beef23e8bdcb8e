"""The three views of a request: x_full (drafter: image + text), x_comp (verifier: caption + OCR + question)
and x_question (drafter-alone baseline: image + question), as chat-template strings and token ids."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if (
    TYPE_CHECKING
):  # annotations only: the command line imports this module for its help, without torch
    import torch

from ..core.errors import (
    ChatTemplateError,
    EmptyQuestionError,
    InputError,
    InvalidImageError,
)
from .image_fit import original_size, processor_fit
from .images import load_image
from .user_text import (
    SENTINEL,
    check_text,
    encode_pieces,
    encode_segments,
    template_pieces,
)


@dataclass
class Request:
    """One question. Cross-modal: `image` (+ its caption / OCR text for the verifier).
    Text-only AsymSpec: `full_context` for the drafter and `compressed_context` for the verifier.
    Text fields are str (caption / ocr None reads as ""); checked by checked_request. The order is generate's:
    Request(image, question, caption=..., ocr=...); text-only: Request(question=..., full_context=...)."""

    image: object = None
    question: str = ""
    caption: str = ""
    ocr: str = ""
    full_context: str | None = None
    compressed_context: str | None = None


@dataclass
class Prompts:
    """The exact prompt strings each model reads (chat template applied). Special-token strings inside the
    user's text were read as ordinary text (user_text.py)."""

    x_full: str
    x_comp: str
    x_question: str


@dataclass
class EncodedView:
    """Token ids of one view; image inputs when the view holds the image."""

    ids: list[int]
    pixel_values: torch.Tensor | None = None  # [num_patches, C * T * P * P]
    image_grid_thw: torch.Tensor | None = None  # [num_images, 3]


@dataclass
class EncodedRequest:
    prompts: Prompts
    full: EncodedView
    comp: EncodedView
    question: EncodedView
    meta: dict = field(default_factory=dict)
    # a cross-family pair's x_comp for the drafter (its own template and ids); None: the drafter reads `comp`
    drafter_comp: EncodedView | None = None

    def view(self, name: str, model: str = "verifier") -> EncodedView:
        """ "x_full", "x_comp" or "x_question" (the names methods.py uses) as `model` reads it."""
        if name == "x_comp" and model != "verifier" and self.drafter_comp is not None:
            return self.drafter_comp
        return {"x_full": self.full, "x_comp": self.comp, "x_question": self.question}[
            name
        ]


def verifier_text(question: str, caption: str = "", ocr: str = "") -> str:
    """The verifier's user message: the image's caption and OCR text, then the question."""
    parts = []
    if caption.strip():
        parts.append(f"Image description:\n{caption.strip()}")
    if ocr.strip():
        parts.append(f"Text in the image (OCR):\n{ocr.strip()}")
    parts.append(question.strip())
    return "\n\n".join(parts)


def context_text(question: str, context: str | None) -> str:
    """Text-only AsymSpec: a context block, then the question."""
    if context and context.strip():
        return f"Context:\n{context.strip()}\n\n{question.strip()}"
    return question.strip()


@dataclass(frozen=True)
class Framed:
    """One view's prompt: the user text between the chat template's pieces before and after it."""

    before: str
    text: str
    after: str

    @property
    def prompt(self) -> str:
        return self.before + self.text + self.after


def checked_request(req: Request) -> Request:
    """`req` with its text arguments checked (InvalidTextError names the argument). Coercions: caption or
    ocr None reads as "" (none); full_context / compressed_context None means absent."""
    if not isinstance(req, Request):
        raise InputError(
            f"a request must be an asymspec_vl.Request, got {type(req).__name__}"
        )
    if req.question is None or (
        isinstance(req.question, str) and not req.question.strip()
    ):
        raise EmptyQuestionError("the question is empty")
    return dataclasses.replace(
        req,
        question=check_text("question", req.question),
        caption=check_text("caption", req.caption, optional=True) or "",
        ocr=check_text("ocr", req.ocr, optional=True) or "",
        full_context=check_text("full_context", req.full_context, optional=True),
        compressed_context=check_text(
            "compressed_context", req.compressed_context, optional=True
        ),
    )


def _framed(owner, text: str, image: bool) -> Framed:
    content = (
        [{"type": "image"}, {"type": "text", "text": SENTINEL}] if image else SENTINEL
    )
    before, after = template_pieces(owner, content)
    return Framed(before, text, after)


def frame_views(
    req: Request, drafter_processor, verifier_tokenizer
) -> tuple[Framed, Framed, Framed]:
    """x_full, x_comp, x_question of a checked request (Qwen3 thinking disabled in every template)."""
    framed = _framed
    if req.image is not None:
        comp = verifier_text(req.question, req.caption, req.ocr)
        full = framed(drafter_processor, comp, image=True)
        only_q = framed(drafter_processor, req.question.strip(), image=True)
    elif req.full_context is not None:
        comp = context_text(req.question, req.compressed_context)
        full = only_q = framed(
            drafter_processor, context_text(req.question, req.full_context), image=False
        )
    else:
        raise InvalidImageError(
            "a request needs an image (cross-modal) or full_context (text-only AsymSpec)"
        )
    return full, framed(verifier_tokenizer, comp, image=False), only_q


def build_prompts(req: Request, drafter_processor, verifier_tokenizer) -> Prompts:
    """x_full / x_comp / x_question strings for `req`."""
    return _prompts(
        *frame_views(checked_request(req), drafter_processor, verifier_tokenizer)
    )


def drafter_comp_view(comp_ids: list[int], vmap, framed_by_drafter) -> EncodedView:
    """A cross-family drafter's x_comp: the verifier's x_comp ids moved through the map when every one is shared
    (the verifier's template speaks tokens the drafter has: today's same-family path when the vocabularies only
    differ in ids), else framed_by_drafter() (the x_comp text in the drafter's own template and ids)."""
    v2d = vmap.to("cpu").v2d
    mapped = v2d[comp_ids].tolist() if comp_ids else []
    return EncodedView(mapped) if all(i >= 0 for i in mapped) else framed_by_drafter()


def encode_request(
    req, drafter_processor, verifier_tokenizer, drafter_comp=None
) -> EncodedRequest:
    """Check the request, build the prompts and tokenize each view (user text as ordinary text, see user_text.py);
    the image is decoded, validated and processed once. A Conversation: conversation.encode.
    drafter_comp (a cross-family pair's VocabMap): the drafter's x_comp (drafter_comp_view)."""
    req = checked_request(req)
    if req.image is not None:
        check_reads_images(drafter_processor)
    full, comp, only_q = frame_views(req, drafter_processor, verifier_tokenizer)
    prompts = _prompts(full, comp, only_q)
    comp_view = EncodedView(encode_pieces(verifier_tokenizer, comp))
    d_tok = getattr(drafter_processor, "tokenizer", drafter_processor)
    d_comp = (
        drafter_comp_view(
            comp_view.ids,
            drafter_comp,
            lambda: EncodedView(
                encode_pieces(d_tok, _framed(drafter_processor, comp.text, False))
            ),
        )
        if drafter_comp is not None
        else None
    )
    if req.image is None:
        full_view = EncodedView(encode_pieces(d_tok, full))
        return EncodedRequest(
            prompts, full_view, comp_view, full_view, drafter_comp=d_comp
        )
    image = load_image(req.image, fit=processor_fit(drafter_processor))
    pixel_values, grid = vision_inputs(drafter_processor, [image])
    return EncodedRequest(
        prompts,
        image_view(drafter_processor, full, pixel_values, grid),
        comp_view,
        image_view(drafter_processor, only_q, pixel_values, grid),
        meta={"image_size": original_size(image)},
        drafter_comp=d_comp,
    )


def _prompts(full: Framed, comp: Framed, only_q: Framed) -> Prompts:
    return Prompts(x_full=full.prompt, x_comp=comp.prompt, x_question=only_q.prompt)


def check_reads_images(drafter_processor) -> None:
    """An image request needs a drafter with an image processor (Qwen3-VL); a text-only drafter (loaded with
    images=False) serves text-only requests alone: InputError naming both fixes."""
    if not hasattr(drafter_processor, "image_processor"):
        raise InputError(
            "this pair's drafter is a text-only model: it cannot read an image. Send a text-only request "
            "(full_context / compressed_context, no image), or load a Qwen3-VL drafter (docs/models.md)"
        )


def vision_inputs(processor, images: list) -> tuple[torch.Tensor, torch.Tensor]:
    """pixel_values [num_patches, C * T * P * P] and image_grid_thw [num_images, 3] (the processor's image
    processor)."""
    try:
        out = processor.image_processor(images=list(images), return_tensors="pt")
    except ValueError as e:  # e.g. an aspect ratio the image processor cannot resize
        raise InvalidImageError(f"the image processor refused the image: {e}") from e
    return out["pixel_values"], out["image_grid_thw"]


def image_view(
    processor, view, pixel_values: torch.Tensor, grid: torch.Tensor
) -> EncodedView:
    """The view's ids (a Framed view, or a conversation's segments) with the template's placeholder of image i
    repeated once per merged token of image i, as the Qwen3-VL processor does."""
    pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    ids = (
        encode_pieces(processor.tokenizer, view)
        if isinstance(view, Framed)
        else encode_segments(processor.tokenizer, view)
    )
    if ids.count(pad) != len(grid):
        raise ChatTemplateError(
            f"the drafter's chat template put {ids.count(pad)} image placeholders in a "
            f"prompt with {len(grid)} image(s)"
        )
    sizes = iter((grid.prod(-1) // processor.image_processor.merge_size**2).tolist())
    return EncodedView(
        [t for i in ids for t in ([i] * next(sizes) if i == pad else [i])],
        pixel_values,
        grid,
    )
