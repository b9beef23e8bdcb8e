"""OCR boxes -> text in reading order (lines top to bottom, words left to right), and EasyOCR result parsing."""

from __future__ import annotations

import ast

from .base import CaptionerError, OCRBox


def reading_order(boxes: list[OCRBox]) -> list[list[OCRBox]]:
    """Group boxes into lines, top to bottom, each line left to right.

    Boxes are visited by top edge; a box joins the current line when its vertical centre is within half a
    line height of the line's mean centre (so a slightly raised or lowered word stays on its line, and a
    tall box does not swallow the lines beside it), else it starts a new line.
    """
    lines: list[list[OCRBox]] = []
    for b in sorted(boxes, key=lambda b: (b.top, b.left)):
        centre = (b.top + b.bottom) / 2
        if lines:
            line = lines[-1]
            line_centre = sum((x.top + x.bottom) / 2 for x in line) / len(line)
            line_height = sum(x.bottom - x.top for x in line) / len(line)
            if abs(centre - line_centre) <= max(line_height, 1.0) / 2:
                line.append(b)
                continue
        lines.append([b])
    return [sorted(line, key=lambda b: b.left) for line in lines]


def ordered_boxes(boxes: list[OCRBox]) -> list[OCRBox]:
    """The boxes flattened in reading order."""
    return [b for line in reading_order(boxes) for b in line]


def ocr_text(boxes: list[OCRBox]) -> str:
    """One line of text per reading line: words joined by spaces, lines by newlines."""
    lines = (
        " ".join(b.text.strip() for b in line if b.text.strip())
        for line in reading_order(boxes)
    )
    return "\n".join(line for line in lines if line)


def parse_easyocr(result, what: str = "OCR result") -> list[OCRBox]:
    """EasyOCR `readtext` output -> OCRBox list.

    Accepts the live output (a list of (box, text, confidence)) or its Python-literal string form as
    stored in MathVista's ocrs_easyocr.json (parsed with ast.literal_eval, never eval). "" and "[]" mean
    nothing was read. A box is 4 corner points; a single [x, y] point is accepted as a degenerate box.
    """
    if result is None:
        return []
    if isinstance(result, str):
        if not result.strip():
            return []
        try:
            result = ast.literal_eval(result.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
            raise CaptionerError(
                f"{what} is not a Python-literal EasyOCR result: {e}"
            ) from e
    if not isinstance(result, (list, tuple)):
        raise CaptionerError(
            f"{what} must be a list of (box, text, confidence), got {type(result).__name__}"
        )
    return [_box(item, what) for item in result]


def _box(item, what: str) -> OCRBox:
    try:
        points, text = item[0], item[1]
        conf = float(item[2]) if len(item) > 2 else 1.0
        if len(points) == 2 and not isinstance(points[0], (list, tuple)):
            points = [points] * 4
        box = [[float(p[0]), float(p[1])] for p in points]
    except (TypeError, IndexError, ValueError) as e:
        raise CaptionerError(f"{what}: cannot read the OCR item {item!r}: {e}") from e
    if not box or not isinstance(text, str):
        raise CaptionerError(f"{what}: cannot read the OCR item {item!r}")
    return OCRBox(box, text, conf)
