"""The three views of a request: x_full (drafter: image + text), x_comp (verifier: caption + OCR + question)
and x_question (drafter-alone baseline: image + question), as chat-template strings and token ids."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .errors import EmptyQuestionError, InvalidImageError
from .images import load_image


@dataclass
class Request:
    """One question. Cross-modal: `image` (+ its caption / OCR text for the verifier).
    Text-only AsymSpec: `full_context` for the drafter and `compressed_context` for the verifier."""

    question: str
    image: object = None
    caption: str = ""
    ocr: str = ""
    full_context: str | None = None
    compressed_context: str | None = None


@dataclass
class Prompts:
    """The exact prompt strings each model reads (chat template applied)."""

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


def _chat(template_owner, content, thinking_off: bool = True) -> str:
    messages = [{"role": "user", "content": content}]
    kwargs = {"enable_thinking": False} if thinking_off else {}
    return template_owner.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


def build_prompts(req: Request, drafter_processor, verifier_tokenizer) -> Prompts:
    """x_full / x_comp / x_question strings for `req` (Qwen3 thinking disabled in every template)."""
    if not isinstance(req.question, str) or not req.question.strip():
        raise EmptyQuestionError("the question is empty")
    if req.image is not None:
        comp = verifier_text(req.question, req.caption, req.ocr)
        full = _chat(drafter_processor, [{"type": "image"}, {"type": "text", "text": comp}])
        only_q = _chat(drafter_processor, [{"type": "image"}, {"type": "text", "text": req.question.strip()}])
    elif req.full_context is not None:
        comp = context_text(req.question, req.compressed_context)
        full = only_q = _chat(drafter_processor, context_text(req.question, req.full_context))
    else:
        raise InvalidImageError("a request needs an image (cross-modal) or full_context (text-only AsymSpec)")
    return Prompts(x_full=full, x_comp=_chat(verifier_tokenizer, comp), x_question=only_q)


def encode_request(req: Request, drafter_processor, verifier_tokenizer) -> EncodedRequest:
    """Build the prompts and tokenize each view; the image is decoded and validated once."""
    prompts = build_prompts(req, drafter_processor, verifier_tokenizer)
    comp = EncodedView(verifier_tokenizer(prompts.x_comp, add_special_tokens=False)["input_ids"])
    if req.image is None:
        tok = getattr(drafter_processor, "tokenizer", drafter_processor)
        full = EncodedView(tok(prompts.x_full, add_special_tokens=False)["input_ids"])
        return EncodedRequest(prompts, full, comp, full)
    image = load_image(req.image)
    return EncodedRequest(prompts, _encode_image_view(drafter_processor, prompts.x_full, image), comp,
                          _encode_image_view(drafter_processor, prompts.x_question, image),
                          meta={"image_size": image.size})


def _encode_image_view(processor, text: str, image) -> EncodedView:
    try:
        enc = processor(text=[text], images=[image], return_tensors="pt", add_special_tokens=False)
    except ValueError as e:  # e.g. an aspect ratio the image processor cannot resize
        raise InvalidImageError(f"the image processor refused the image: {e}") from e
    return EncodedView(enc["input_ids"][0].tolist(), enc["pixel_values"], enc["image_grid_thw"])
