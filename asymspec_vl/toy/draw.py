"""Rendering of toy-world scenes: coloured shapes in 32x32 cells, each carrying a seven-segment digit."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

CELL = (
    32  # one cell = one 2x2 merge window of 16-pixel patches = one Qwen3-VL image token
)
COLOURS = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (45, 95, 225),
    "yellow": (235, 200, 25),
    "purple": (150, 65, 195),
    "orange": (245, 135, 25),
}
SHAPES = ("circle", "square", "triangle", "diamond")

# Seven-segment encoding: segments a (top), b (top right), c (bottom right), d (bottom), e (bottom left),
# f (top left), g (middle). Drawn as rectangles, so the digits look the same with every Pillow build.
SEGMENTS = {
    0: "abcdef",
    1: "bc",
    2: "abdeg",
    3: "abcdg",
    4: "bcfg",
    5: "acdfg",
    6: "acdefg",
    7: "abc",
    8: "abcdefg",
    9: "abcdfg",
}


def _segment_boxes(
    x: int, y: int, w: int, h: int, t: int
) -> dict[str, tuple[int, int, int, int]]:
    """Boxes (x0, y0, x1, y1), inclusive, of the seven segments of a w x h digit at (x, y), stroke t."""
    m = h // 2
    return {
        "a": (x, y, x + w - 1, y + t - 1),
        "b": (x + w - t, y, x + w - 1, y + m),
        "c": (x + w - t, y + m, x + w - 1, y + h - 1),
        "d": (x, y + h - t, x + w - 1, y + h - 1),
        "e": (x, y + m, x + t - 1, y + h - 1),
        "f": (x, y, x + t - 1, y + m),
        "g": (x, y + m - t // 2, x + w - 1, y + m - t // 2 + t - 1),
    }


def draw_digit(
    draw: ImageDraw.ImageDraw,
    digit: int,
    cx: int,
    cy: int,
    ink: tuple[int, int, int],
    w: int = 7,
    h: int = 12,
    t: int = 2,
) -> None:
    """A seven-segment digit centred at (cx, cy)."""
    boxes = _segment_boxes(cx - w // 2, cy - h // 2, w, h, t)
    for seg in SEGMENTS[digit]:
        draw.rectangle(boxes[seg], fill=ink)


def draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, cx: int, cy: int, r: int, fill
) -> None:
    """A filled shape of radius r centred at (cx, cy)."""
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "square":
        s = int(r * 0.85)
        draw.rectangle((cx - s, cy - s, cx + s, cy + s), fill=fill)
    elif shape == "triangle":
        draw.polygon(
            [(cx, cy - r), (cx - r, cy + r - 2), (cx + r, cy + r - 2)], fill=fill
        )
    elif shape == "diamond":
        draw.polygon(
            [(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill
        )
    else:
        raise ValueError(f"unknown shape {shape!r}")


def looks_like_scene(image) -> bool:
    """Whether an image has a toy scene's shape: one CELL high, a whole number of cells wide (the toy pair
    reads nothing else)."""
    return image.height == CELL and image.width % CELL == 0 and image.width > 0


def render_scene(items, seed) -> Image.Image:
    """RGB image, one CELL x CELL cell per item (left to right): shape with jitter, digit, noisy background.
    items: objects with .colour, .shape, .digit; seed: an int or tuple of ints. Deterministic in both."""
    rng = np.random.default_rng(list(seed) if isinstance(seed, tuple) else seed)
    width = CELL * len(items)
    base = rng.integers(205, 250, size=3)
    pixels = np.clip(base + rng.normal(0.0, 6.0, size=(CELL, width, 3)), 0, 255).astype(
        np.uint8
    )  # [H, W, 3]
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    # per item: x jitter, y jitter, radius, colour jitter (3), ink (3)
    draws = np.stack(
        [
            rng.integers(-2, 3, len(items)),
            rng.integers(-1, 2, len(items)),
            rng.integers(13, 16, len(items)),
        ],
        axis=1,
    ).tolist()  # [N, 3]
    tints = rng.integers(-20, 21, (len(items), 3)).tolist()  # [N, 3]
    inks = rng.integers(0, 50, (len(items), 3)).tolist()  # [N, 3]
    for i, item in enumerate(items):
        dx, dy, r = draws[i]
        cx, cy = i * CELL + CELL // 2 + dx, CELL // 2 + dy
        fill = tuple(
            min(255, max(0, c + t)) for c, t in zip(COLOURS[item.colour], tints[i])
        )
        draw_shape(draw, item.shape, cx, cy, r, fill)
        draw_digit(
            draw,
            item.digit,
            cx,
            cy + (3 if item.shape == "triangle" else 0),
            tuple(inks[i]),
        )
    return image
