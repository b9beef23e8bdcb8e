"""Every Pillow mode and numpy pixel array to 8-bit RGB, faithfully (scaled, composited) or refused.

The contract (README "Input contract"):
  8-bit modes      1, L, P, RGB, RGBX, CMYK, YCbCr, LAB, HSV: Pillow's own conversion (LAB and HSV included)
  with alpha       LA, PA, RGBA, RGBa, and any mode with a transparent colour or palette entry: composited
                   onto white (the page a chart or a scan with a transparent background is drawn on)
  16-bit           I;16, I;16L, I;16B, I;16N: value * 255 / 65535 (rounded), so 65535 is white, not 0..255 clipped
  32-bit integer   I: read as 16-bit (the mode older Pillow gives 16-bit PNGs) when every value lies in
                   0..65535; refused otherwise
  float            F: values in [0, 1] scaled by 255; NaN, infinity or values outside [0, 1] are refused
  numpy arrays     [H, W] or [H, W, C] with C in 1..4 (gray, gray + alpha, RGB, RGBA); dtypes bool, uint8,
                   uint16 and float16/32/64 in [0, 1] by the rules above; other dtypes are ambiguous and refused
Anything else (La, I;16S, ...) is refused with InvalidImageError naming the mode.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from ..core.errors import InvalidImageError

ALPHA_BACKGROUND = (255, 255, 255, 255)
EIGHT_BIT_MODES = ("1", "L", "P", "RGB", "RGBX", "CMYK", "YCbCr", "LAB", "HSV")
ALPHA_MODES = ("LA", "PA", "RGBA", "RGBa")
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
CHANNELS = (
    2,
    3,
    4,
)  # of an [H, W, C] array: gray + alpha, RGB, RGBA (C = 1 is read as [H, W])
UINT16_MAX = 65535


def image_to_rgb(img: Image.Image, name: str) -> Image.Image:
    """An RGB copy of a decoded Pillow image of any supported mode (see the module docstring)."""
    mode = img.mode
    if mode in SIXTEEN_BIT_MODES or mode in ("I", "F"):
        return array_to_rgb(_wide_pixels(img, name), name)
    if mode in ALPHA_MODES or (mode in EIGHT_BIT_MODES and "transparency" in img.info):
        return Image.alpha_composite(
            Image.new("RGBA", img.size, ALPHA_BACKGROUND), img.convert("RGBA")
        ).convert("RGB")
    if mode in EIGHT_BIT_MODES:
        return img.convert("RGB")
    raise InvalidImageError(
        f"{name} has pixel mode {mode!r}, which cannot be read faithfully: convert it to "
        f"one of {EIGHT_BIT_MODES + ALPHA_MODES + SIXTEEN_BIT_MODES + ('I', 'F')}"
    )


def array_to_rgb(pixels: np.ndarray, name: str) -> Image.Image:
    """An RGB image from an [H, W] or [H, W, C] array of bool, uint8, uint16 or float in [0, 1]."""
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[..., 0]
    if pixels.ndim not in (2, 3) or (
        pixels.ndim == 3 and pixels.shape[2] not in CHANNELS
    ):
        raise InvalidImageError(
            f"{name} has shape {pixels.shape}: expected [H, W] or [H, W, C] with C in 1..4 "
            "(channels last)"
        )
    if pixels.shape[0] == 0 or pixels.shape[1] == 0:
        raise InvalidImageError(
            f"{name} has no pixels ({pixels.shape[1]}x{pixels.shape[0]})"
        )
    eight_bit = np.ascontiguousarray(
        _to_uint8(pixels, name)
    )  # [H, W] or [H, W, C]: L, LA, RGB or RGBA
    return image_to_rgb(Image.fromarray(eight_bit), name)


def _wide_pixels(img: Image.Image, name: str) -> np.ndarray:
    """The pixels of an I;16*, I or F image as uint16 or float32 [H, W], range-checked for mode I."""
    pixels = np.asarray(img)
    if img.mode != "I":
        return pixels
    if pixels.min() < 0 or pixels.max() > UINT16_MAX:
        raise InvalidImageError(
            f"{name} is a 32-bit integer image with values in [{pixels.min()}, {pixels.max()}]; "
            f"only 0..{UINT16_MAX} (16-bit data) can be read: rescale it to 8 or 16 bits"
        )
    return pixels.astype(np.uint16)


def _to_uint8(pixels: np.ndarray, name: str) -> np.ndarray:
    kind = pixels.dtype
    if kind == np.bool_:
        return pixels.astype(np.uint8) * 255
    if kind == np.uint8:
        return pixels
    if kind.kind == "u" and kind.itemsize == 2:  # uint16 in either byte order
        return (
            (pixels.astype(np.uint32) * 255 + UINT16_MAX // 2) // UINT16_MAX
        ).astype(np.uint8)
    if kind.kind == "f":
        if not np.isfinite(pixels).all():
            raise InvalidImageError(f"{name} holds NaN or infinite pixel values")
        low, high = float(pixels.min()), float(pixels.max())
        if low < 0.0 or high > 1.0:
            raise InvalidImageError(
                f"{name} has float pixels in [{low:g}, {high:g}]; float images must lie in "
                "[0, 1] (divide 8-bit data by 255, or give uint8)"
            )
        return np.rint(pixels.astype(np.float64) * 255).astype(np.uint8)
    raise InvalidImageError(
        f"{name} has dtype {kind}, whose pixel range is ambiguous: give bool, uint8 (0-255), "
        "uint16 (0-65535) or float in [0, 1]"
    )
