"""The captioner protocol: what turns an image into the verifier's text (caption + OCR), and its result type."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from asymspec_vl.core.errors import AsymSpecError, InputError


class CaptionerError(AsymSpecError):
    """A captioner cannot run (missing weights, a model that cannot see images, unreadable caption data)."""


class CaptionNotFoundError(InputError, KeyError):
    """A precomputed captioner has no caption and no OCR text for the requested key."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class OCRBox:
    """One piece of text read from the image: its quadrilateral, the text, the reader's confidence."""

    box: list[list[float]]  # [4, 2]: corner points (x, y), clockwise from top-left
    text: str
    confidence: float = 1.0

    @property
    def left(self) -> float:
        return min(p[0] for p in self.box)

    @property
    def top(self) -> float:
        return min(p[1] for p in self.box)

    @property
    def bottom(self) -> float:
        return max(p[1] for p in self.box)


@dataclass
class ImageText:
    """The verifier's view of one image: a caption, the OCR text in reading order, and the raw OCR boxes."""

    caption: str = ""
    ocr: str = ""
    ocr_boxes: list[OCRBox] = field(default_factory=list)  # in reading order
    source: str = ""  # the captioner(s) that produced it

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ImageText:
        boxes = [
            OCRBox(b["box"], b["text"], b.get("confidence", 1.0))
            for b in d.get("ocr_boxes", [])
        ]
        return cls(d.get("caption", ""), d.get("ocr", ""), boxes, d.get("source", ""))


@runtime_checkable
class Captioner(Protocol):
    """Anything that describes an image for the verifier.

    `name` identifies the captioner and the settings that change its output (it is part of cache keys).
    `describe(image, key)`: image is a path, bytes, PIL image or array (asymspec_vl.inputs.images.load_image);
    key optionally names the image (e.g. a MathVista pid) for captioners that look text up instead of
    computing it. Returns an ImageText; fields a captioner does not produce stay empty.
    """

    name: str

    def describe(self, image=None, key: str | None = None) -> ImageText: ...


class CombinedCaptioner:
    """The caption from one captioner and the OCR text from another (either may be None)."""

    def __init__(self, caption: Captioner | None = None, ocr: Captioner | None = None):
        if caption is None and ocr is None:
            raise CaptionerError(
                "CombinedCaptioner needs a caption captioner, an OCR captioner or both"
            )
        self.caption, self.ocr = caption, ocr
        self.name = f"caption={caption.name if caption else None}+ocr={ocr.name if ocr else None}"

    def describe(self, image=None, key: str | None = None) -> ImageText:
        cap = self.caption.describe(image, key) if self.caption else ImageText()
        ocr = self.ocr.describe(image, key) if self.ocr else ImageText()
        sources = "+".join(s for s in (cap.source, ocr.source) if s)
        return ImageText(cap.caption, ocr.ocr, ocr.ocr_boxes, sources)
