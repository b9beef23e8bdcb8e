"""Every Pillow mode and numpy pixel array becomes RGB faithfully (16-bit and float scaled, alpha on white), or is
refused with InvalidImageError; never silently wrong (before: a 16-bit image became all white)."""

import io

import numpy as np
import pytest
from PIL import Image

from asymspec_vl.core.errors import InvalidImageError
from asymspec_vl.inputs.images import load_image

# a 16-bit ramp [4, 16]: 0, 4369, ..., 65535 along each row (every value maps to a distinct 8-bit level)
RAMP16 = np.tile(np.arange(16, dtype=np.uint16) * 4369, (4, 1))
RAMP8 = np.tile(
    np.arange(16, dtype=np.uint8) * 17, (4, 1)
)  # the same ramp in 8 bits: 65535 -> 255


def gray(img) -> np.ndarray:
    rgb = np.asarray(load_image(img)).astype(int)  # [H, W, 3]
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
    return rgb[..., 0]


def png(img: Image.Image, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", **kwargs)
    return buf.getvalue()


SIXTEEN_BIT = {
    "I;16": lambda: Image.frombytes("I;16", (16, 4), RAMP16.astype("<u2").tobytes()),
    "I;16L": lambda: Image.frombytes("I;16L", (16, 4), RAMP16.astype("<u2").tobytes()),
    "I;16B": lambda: Image.frombytes("I;16B", (16, 4), RAMP16.astype(">u2").tobytes()),
    "I": lambda: Image.fromarray(RAMP16.astype(np.int32)),
    "16-bit PNG file": lambda: png(Image.fromarray(RAMP16)),
    "uint16 array": lambda: RAMP16,
    "big-endian uint16 array": lambda: RAMP16.astype(">u2"),
    "uint16 [H, W, 1] array": lambda: RAMP16[..., None],
    "F": lambda: Image.fromarray(RAMP16.astype(np.float32) / 65535),
    "float32 array": lambda: RAMP16.astype(np.float32) / 65535,
    "float64 array": lambda: RAMP16 / 65535.0,
}


@pytest.mark.parametrize("make", SIXTEEN_BIT.values(), ids=SIXTEEN_BIT.keys())
def test_sixteen_bit_and_float_gradients_keep_their_gradient(make):
    assert (gray(make()) == RAMP8).all()


def test_sixteen_bit_rgb_array_is_scaled_per_channel():
    rgb16 = np.stack(
        [RAMP16, RAMP16[:, ::-1], np.full_like(RAMP16, 32768)], axis=-1
    )  # [4, 16, 3]
    out = np.asarray(load_image(rgb16)).astype(int)
    assert (
        (out[..., 0] == RAMP8).all()
        and (out[..., 1] == RAMP8[:, ::-1]).all()
        and (out[..., 2] == 128).all()
    )


def rgb_ramp() -> Image.Image:
    """A colourful [8, 16] RGB test image (hues along x, brightness along y), inside the 8-bit LAB gamut."""
    x, y = np.meshgrid(np.arange(16), np.arange(8))
    return Image.fromarray(
        np.stack([64 + x * 8, 192 - x * 8, 64 + y * 16], axis=-1).astype(np.uint8)
    )


@pytest.mark.parametrize(
    "mode, tolerance",
    [("RGB", 0), ("RGBX", 0), ("CMYK", 0), ("YCbCr", 3), ("HSV", 3), ("LAB", 10)],
)  # the 8-bit quantization of each colour space
def test_eight_bit_colour_modes_give_back_the_colours(mode, tolerance):
    src = rgb_ramp()
    out = np.asarray(load_image(src.convert(mode))).astype(int)
    assert np.abs(out - np.asarray(src).astype(int)).max() <= tolerance


def test_gray_palette_and_bilevel_modes():
    assert (gray(Image.fromarray(RAMP8)) == RAMP8).all()  # L
    assert (
        gray(Image.fromarray(RAMP8).convert("P")) == RAMP8
    ).all()  # P with a gray palette
    bits = RAMP8 >= 128
    assert (gray(Image.fromarray(bits)) == bits * 255).all()  # mode "1"
    assert (gray(bits) == bits * 255).all()  # a bool array


def half_transparent(mode: str) -> Image.Image:
    """Three red pixels: opaque, fully transparent, half transparent (alpha 255, 0, 128)."""
    rgba = Image.fromarray(
        np.array([[[200, 0, 0, 255], [200, 0, 0, 0], [200, 0, 0, 128]]], dtype=np.uint8)
    )
    return rgba.convert(mode)


@pytest.mark.parametrize("mode", ["RGBA", "RGBa", "LA", "PA"])
def test_alpha_is_composited_onto_white(mode):
    src = half_transparent(mode)
    colour = np.asarray(src.convert("RGBA")).astype(int)[
        0, 0, :3
    ]  # the mode's own rendering of red
    out = np.asarray(load_image(src)).astype(int)[0]  # [3, 3]
    assert (out[0] == colour).all()
    assert (out[1] == 255).all()  # transparent: white, not the hidden colour or black
    assert (np.abs(out[2] - (colour * 128 + 255 * 127) / 255) <= 2).all()


def test_transparent_palette_entry_and_transparent_colour_show_white():
    pal = Image.new("P", (2, 1))
    pal.putpalette([0, 0, 0, 255, 0, 0])
    pal.putpixel((1, 0), 1)
    pal.info["transparency"] = 0  # palette entry 0 (black) is transparent
    assert np.asarray(load_image(pal)).tolist() == [[[255, 255, 255], [255, 0, 0]]]
    rgb = Image.fromarray(np.array([[[1, 2, 3], [9, 9, 9]]], dtype=np.uint8))
    assert np.asarray(load_image(png(rgb, transparency=(1, 2, 3)))).tolist() == [
        [[255, 255, 255], [9, 9, 9]]
    ]


def test_rgba_and_gray_alpha_arrays():
    rgba = np.array([[[10, 20, 30, 255], [10, 20, 30, 0]]], dtype=np.uint8)
    assert np.asarray(load_image(rgba)).tolist() == [[[10, 20, 30], [255, 255, 255]]]
    la16 = np.array(
        [[[65535, 65535], [0, 0]]], dtype=np.uint16
    )  # white opaque, black transparent
    assert np.asarray(load_image(la16)).tolist() == [[[255, 255, 255], [255, 255, 255]]]


def test_multi_frame_file_gives_its_first_frame():
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    assert Image.open(io.BytesIO(buf.getvalue())).n_frames == 2
    assert np.asarray(load_image(buf.getvalue()))[0, 0].tolist() == [255, 0, 0]


def test_exif_orientation_is_applied():
    img = Image.fromarray(
        np.array([[[255, 0, 0], [0, 0, 255]]], dtype=np.uint8)
    )  # 2 wide, 1 high
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    out = load_image(png(img, exif=exif))
    assert out.size == (1, 2) and np.asarray(out)[:, 0].tolist() == [
        [255, 0, 0],
        [0, 0, 255],
    ]


@pytest.mark.parametrize(
    "image, words",
    [
        (Image.fromarray(np.array([[-1, 70000]], dtype=np.int32)), "only 0..65535"),
        (Image.fromarray(np.array([[0.0, 2.0]], dtype=np.float32)), "must lie in"),
        (Image.fromarray(np.array([[0.0, np.nan]], dtype=np.float32)), "NaN"),
        (
            half_transparent("RGBA")
            .convert("RGBa")
            .convert("RGBA")
            .convert("LA")
            .convert("La"),
            "pixel mode 'La'",
        ),
        (np.array([[0.5, 1.5]]), "must lie in"),
        (np.array([[0.5, np.inf]]), "infinite"),
        (np.zeros((4, 4), dtype=np.int64), "dtype int64"),
        (np.zeros((4, 4), dtype=np.uint32), "dtype uint32"),
        (np.zeros((4, 4), dtype=np.complex64), "dtype complex64"),
        (np.zeros((3, 16, 16), dtype=np.uint8), "channels last"),
        (np.zeros((4, 4, 5), dtype=np.uint8), "channels last"),
        (np.zeros(16, dtype=np.uint8), "shape"),
        (np.zeros((0, 4, 3), dtype=np.uint8), "no pixels"),
    ],
)
def test_ambiguous_or_unreadable_pixels_are_refused(image, words):
    with pytest.raises(InvalidImageError, match=words):
        load_image(image)


def test_sixteen_bit_values_are_scaled_by_255_over_65535_and_rounded():
    """v -> round(v * 255 / 65535), not v >> 8 (which maps 255 to 0 and 65280 to 255)."""
    values = np.array(
        [[0, 128, 255, 32767, 32768, 65280, 65534, 65535]], dtype=np.uint16
    )
    expected = [int(int(v) * 255 / 65535 + 0.5) for v in values[0]]
    assert expected == [0, 0, 1, 127, 128, 254, 255, 255]
    assert list(np.asarray(load_image(values))[0, :, 0]) == expected
    assert (
        list(np.asarray(load_image(Image.fromarray(values, "I;16")))[0, :, 0])
        == expected
    )


@pytest.mark.parametrize("lowest", [-1, -65536])
def test_negative_mode_i_values_are_refused_not_wrapped(lowest):
    img = Image.fromarray(np.array([[lowest, 7]], dtype=np.int32), "I")
    with pytest.raises(InvalidImageError, match=f"values in \\[{lowest}, 7\\]"):
        load_image(img)
