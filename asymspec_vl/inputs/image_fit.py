"""Decode a large image at about the size the drafter's processor will use: the processor shrinks an image to its
own size anyway (Qwen-VL's smart_resize), so a large one is brought down before the processor ever sees it, where
its full-size copies (a uint8 tensor, then float32 for the resize: ~16 bytes a pixel) cost the most memory.

Only an image over REDUCE_PIXELS that the processor would shrink by 2x or more per side is touched: a JPEG is
decoded at 1/2, 1/4 or 1/8 scale (Pillow's `draft`, the DCT's own scaling), and any image is box-averaged by
the largest integer factor k that keeps it at least the processor's size per side (`Image.reduce(k)`); the
processor then resizes the rest of the way as before. Smaller images reach the processor unchanged, bit for bit.
The library and the server load images through this same rule, so their answers on one image stay equal."""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

from ..core.limits import LIMITS

Size = tuple[int, int]  # (width, height), PIL's order
Fit = Callable[[Size], Size]  # an image's size -> the size the processor resizes it to
REDUCE_PIXELS = (
    LIMITS.reduce_pixels
)  # images up to this many pixels reach the processor untouched
REDUCIBLE_MODES = (
    "L",
    "RGB",
)  # modes box-averaged as decoded; others are reduced after their RGB conversion
ORIGINAL_SIZE = "asymspec_original_size"  # a loaded image's info key: its size upright, before any reduction


def original_size(img: Image.Image) -> Size:
    """The size an image loaded by load_image had (upright) before it was reduced: what results report."""
    return tuple(img.info.get(ORIGINAL_SIZE, img.size))


def processor_fit(processor) -> Fit | None:
    """The size rule of a Qwen-VL image processor (smart_resize over patch_size x merge_size, its size's
    shortest_edge / longest_edge as min / max pixels); None for a processor without that rule (then no image is
    reduced)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
        smart_resize,
    )  # lazy: loads transformers

    ip = getattr(processor, "image_processor", None)
    size = getattr(ip, "size", None)
    try:
        factor = int(ip.patch_size) * int(ip.merge_size)
        low, high = int(size["shortest_edge"]), int(size["longest_edge"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None

    def fit(wh: Size) -> Size:
        try:
            h, w = smart_resize(
                wh[1], wh[0], factor=factor, min_pixels=low, max_pixels=high
            )
        except ValueError:  # an aspect ratio the processor refuses: it says so itself (prompts.vision_inputs)
            return wh
        return w, h

    return fit


def reduction(size: Size, fit: Fit | None) -> int:
    """The integer factor k >= 1 an image of `size` is reduced by: 1 up to REDUCE_PIXELS (or without a fit), else
    the largest k keeping both sides at least the processor's size."""
    w, h = size
    if fit is None or w * h <= REDUCE_PIXELS:
        return 1
    tw, th = fit(size)
    return max(1, min(w // max(tw, 1), h // max(th, 1)))


def draft(img: Image.Image, fit: Fit | None) -> None:
    """Ask a JPEG to decode at the smallest DCT scale (1/2, 1/4, 1/8) still at least the processor's size (call
    before its pixels load; other formats decode at full size)."""
    if img.format in ("JPEG", "MPO") and reduction(img.size, fit) >= 2:
        img.draft(None, fit(img.size))


def reduced(img: Image.Image, fit: Fit | None) -> Image.Image:
    """`img` box-averaged by reduction(img.size) when its mode allows it (L or RGB without a transparent colour),
    else `img` itself."""
    k = reduction(img.size, fit)
    return (
        img.reduce(k)
        if k >= 2 and img.mode in REDUCIBLE_MODES and "transparency" not in img.info
        else img
    )
