"""Precomputed captions and OCR texts looked up by key (e.g. MathVista's official Bard captions and EasyOCR texts)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from .base import CaptionerError, CaptionNotFoundError, ImageText
from .reading import ocr_text, ordered_boxes, parse_easyocr


def read_texts(path: str | Path) -> dict:
    """A JSON file of key -> text: either a plain mapping or MathVista's envelope {model, ..., texts: {...}}."""
    p = Path(path)
    if not p.is_file():
        raise CaptionerError(f"caption/OCR file not found: {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaptionerError(f"{p} is not a JSON file: {e}") from e
    if isinstance(data, dict) and isinstance(data.get("texts"), dict):
        data = data["texts"]
    if not isinstance(data, dict):
        raise CaptionerError(
            f"{p} must hold a JSON object of key -> text (or {{'texts': {{...}}}})"
        )
    return {str(k): v for k, v in data.items()}


class PrecomputedCaptioner:
    """Captions and OCR results stored ahead of time, looked up by key (the image is not read).

    captions: key -> caption text. ocr: key -> an EasyOCR result (a list of (box, text, confidence), or its
    Python-literal string as in MathVista's ocrs_easyocr.json) or plain OCR text. A key present in neither
    raises CaptionNotFoundError; a key present in one gets an empty string for the other.
    """

    def __init__(
        self,
        captions: Mapping[str, str] | None = None,
        ocr: Mapping[str, object] | None = None,
        name: str = "precomputed",
    ):
        if captions is None and ocr is None:
            raise CaptionerError(
                "PrecomputedCaptioner needs captions, OCR results or both"
            )
        self.captions = {str(k): v for k, v in (captions or {}).items()}
        self.ocr = {str(k): v for k, v in (ocr or {}).items()}
        bad = [k for k, v in self.captions.items() if not isinstance(v, str)]
        if bad:
            raise CaptionerError(f"captions must be strings; not for key(s) {bad[:5]}")
        self.name = name

    @classmethod
    def from_json(
        cls, captions: str | Path | None = None, ocr: str | Path | None = None
    ) -> PrecomputedCaptioner:
        """Load from JSON files; the name carries the files' content hashes (cache keys stay honest)."""
        parts, texts = [], {}
        for role, path in (("captions", captions), ("ocr", ocr)):
            if path is not None:
                texts[role] = read_texts(path)
                parts.append(
                    f"{role}={hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]}"
                )
        return cls(
            texts.get("captions"),
            texts.get("ocr"),
            name="precomputed:" + ",".join(parts),
        )

    def __contains__(self, key: str) -> bool:
        return str(key) in self.captions or str(key) in self.ocr

    def has_caption(self, key: str) -> bool:
        return str(key) in self.captions

    def describe(self, image=None, key: str | None = None) -> ImageText:
        if key is None:
            raise CaptionerError(
                "precomputed captions are looked up by key (e.g. a MathVista pid): pass key="
            )
        key = str(key)
        if key not in self:
            raise CaptionNotFoundError(
                f"no precomputed caption or OCR text for key {key!r} ({self.name})"
            )
        raw = self.ocr.get(key)
        if isinstance(raw, str) and not raw.lstrip().startswith("["):
            text, boxes = raw.strip(), []  # plain OCR text
        else:
            boxes = ordered_boxes(parse_easyocr(raw, f"the OCR result of key {key!r}"))
            text = ocr_text(boxes)
        return ImageText(self.captions.get(key, ""), text, boxes, self.name)
