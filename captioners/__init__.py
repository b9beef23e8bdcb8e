"""Producers of the verifier's view of an image (x_comp): OCR (EasyOCR), precomputed texts, a local VLM, a cache."""

from .base import (
    Captioner,
    CaptionerError,
    CaptionNotFoundError,
    CombinedCaptioner,
    ImageText,
    OCRBox,
)
from .cache import CachedCaptioner
from .ocr import EasyOCRCaptioner
from .precomputed import PrecomputedCaptioner, read_texts
from .reading import ocr_text, ordered_boxes, parse_easyocr, reading_order

__all__ = [
    "Captioner",
    "CaptionerError",
    "CaptionNotFoundError",
    "CombinedCaptioner",
    "ImageText",
    "OCRBox",
    "CachedCaptioner",
    "PrecomputedCaptioner",
    "read_texts",
    "EasyOCRCaptioner",
    "VLMCaptioner",
    "ocr_text",
    "ordered_boxes",
    "parse_easyocr",
    "reading_order",
]


def __getattr__(name):  # EasyOCR and transformers load only when these are used
    if name == "EasyOCRCaptioner":
        return EasyOCRCaptioner
    if name == "VLMCaptioner":
        from .vlm import VLMCaptioner  # lazy: loads torch

        return VLMCaptioner
    raise AttributeError(name)
