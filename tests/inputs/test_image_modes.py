"""Every Pillow mode and numpy pixel array becomes RGB faithfully (16-bit and float scaled, alpha on white), or is
refused with InvalidImageError; never silently wrong (before: a 16-bit image became all white)."""

import io

import numpy as np
import pytest
from PIL import Image

from asymspec_vl.core.errors import InvalidImageError
from asymspec_vl.inputs.images import load_image

# Pillow's deprecations fail here: the tests build their images with the API Pillow keeps
pytestmark = pytest.mark.filterwarnings(
    "error:.*will be removed in Pillow:DeprecationWarning"
)

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
    # uint16 -> mode I;16 by itself (Pillow 13 drops fromarray's mode argument)
    sixteen_bit = Image.fromarray(values)
    assert sixteen_bit.mode == "I;16"
    assert list(np.asarray(load_image(sixteen_bit))[0, :, 0]) == expected


@pytest.mark.parametrize("lowest", [-1, -65536])
def test_negative_mode_i_values_are_refused_not_wrapped(lowest):
    img = Image.fromarray(np.array([[lowest, 7]], dtype=np.int32), "I")
    with pytest.raises(InvalidImageError, match=f"values in \\[{lowest}, 7\\]"):
        load_image(img)


# image_modes itself, called directly on small real images of each mode: each result against the pixels computed
# here from the source values (Pillow's own conversion only for the colour spaces the contract leaves to it).
GRAYS = np.array([[0, 17, 128], [200, 254, 255]], dtype=np.uint8)  # [2, 3]
ALPHAS = np.array([[0, 255, 128], [64, 1, 200]], dtype=np.uint8)  # [2, 3]


def on_white(value: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """value composited onto white by alpha (0..255), as floats."""
    value, alpha = np.asarray(value, float), np.asarray(alpha, float)
    return value * alpha / 255.0 + 255.0 * (1 - alpha / 255.0)


def test_image_to_rgb_of_each_eight_bit_and_alpha_mode():
    from asymspec_vl.inputs.image_modes import image_to_rgb

    rgb = np.stack([GRAYS, 255 - GRAYS, GRAYS // 2], axis=-1)  # [2, 3, 3]
    gray3 = np.repeat(GRAYS[..., None], 3, axis=-1)
    palette = Image.fromarray(rgb).quantize(colors=6, method=Image.Quantize.MEDIANCUT)
    cases = {
        "1": (
            Image.fromarray(GRAYS > 127),
            np.repeat((GRAYS > 127)[..., None] * 255, 3, axis=-1),
            0,
        ),
        "L": (Image.fromarray(GRAYS), gray3, 0),
        "P": (palette, np.asarray(palette.convert("RGB")), 0),
        "RGB": (Image.fromarray(rgb), rgb, 0),
        "RGBX": (Image.fromarray(rgb).convert("RGBX"), rgb, 0),
        "CMYK": (Image.fromarray(rgb).convert("CMYK"), rgb, 0),
        "LA": (
            Image.fromarray(np.stack([GRAYS, ALPHAS], axis=-1), "LA"),
            np.repeat(on_white(GRAYS, ALPHAS)[..., None], 3, axis=-1),
            1,
        ),
        "RGBA": (
            Image.fromarray(np.concatenate([rgb, ALPHAS[..., None]], axis=-1), "RGBA"),
            on_white(rgb, ALPHAS[..., None]),
            1,
        ),
    }
    for mode, (img, expected, tolerance) in cases.items():
        assert img.mode == mode
        out = image_to_rgb(img, "the image")
        assert out.mode == "RGB" and out.size == (3, 2), mode
        assert np.abs(np.asarray(out).astype(float) - expected).max() <= tolerance, mode


@pytest.mark.parametrize("mode", ["YCbCr", "LAB", "HSV"])
def test_image_to_rgb_reads_colour_spaces_by_pillows_own_conversion(mode):
    from asymspec_vl.inputs.image_modes import image_to_rgb

    img = rgb_ramp().convert(mode)
    assert np.array_equal(
        np.asarray(image_to_rgb(img, "x")), np.asarray(img.convert("RGB"))
    )


def test_a_transparent_palette_entry_is_white_and_an_opaque_palette_is_not_composited():
    from asymspec_vl.inputs.image_modes import image_to_rgb

    img = Image.fromarray(np.array([[0, 1], [1, 2]], dtype=np.uint8), "P")
    img.putpalette([10, 20, 30, 200, 0, 0, 0, 0, 255] + [0] * 759)
    opaque = np.asarray(image_to_rgb(img, "x"))
    assert opaque[0, 0].tolist() == [10, 20, 30] and opaque[1, 1].tolist() == [
        0,
        0,
        255,
    ]
    img.info["transparency"] = 1  # palette entry 1 is see-through
    out = np.asarray(image_to_rgb(img, "x"))
    assert out[0, 1].tolist() == out[1, 0].tolist() == [255, 255, 255]
    assert out[0, 0].tolist() == [10, 20, 30] and out[1, 1].tolist() == [0, 0, 255]


def test_image_to_rgb_of_wide_modes_scales_to_eight_bits():
    from asymspec_vl.inputs.image_modes import image_to_rgb

    wide = np.array([[0, 1, 128], [32768, 65534, 65535]])  # [2, 3]
    eight = np.floor(wide * 255 / 65535 + 0.5).astype(
        int
    )  # rounded half up, computed here
    floats = np.array([[0.0, 0.002, 0.5], [0.501, 0.999, 1.0]], dtype=np.float32)
    for img, expected in (
        (Image.frombytes("I;16", (3, 2), wide.astype("<u2").tobytes()), eight),
        (Image.frombytes("I;16B", (3, 2), wide.astype(">u2").tobytes()), eight),
        (Image.fromarray(wide.astype(np.int32)), eight),  # mode I holding 16-bit data
        (Image.fromarray(floats), np.rint(floats.astype(np.float64) * 255).astype(int)),
    ):
        out = np.asarray(image_to_rgb(img, "x")).astype(int)
        assert (out == expected[..., None]).all(), img.mode


def test_array_to_rgb_dtypes_and_channels():
    from asymspec_vl.inputs.image_modes import array_to_rgb

    rgb = np.stack([GRAYS, 255 - GRAYS, GRAYS // 2], axis=-1)
    assert np.array_equal(np.asarray(array_to_rgb(rgb, "x")), rgb)
    assert np.array_equal(
        np.asarray(array_to_rgb(GRAYS[..., None], "x"))[..., 1], GRAYS
    )  # [H, W, 1]: gray
    assert (
        np.asarray(array_to_rgb(GRAYS > 127, "x"))[..., 0].tolist()
        == ((GRAYS > 127) * 255).tolist()
    )
    two = np.asarray(array_to_rgb(np.stack([GRAYS, ALPHAS], axis=-1), "x")).astype(
        float
    )  # gray + alpha
    assert np.abs(two[..., 2] - on_white(GRAYS, ALPHAS)).max() <= 1


@pytest.mark.parametrize(
    "pixels, words",
    [
        (
            np.zeros((2, 3, 5), np.uint8),
            r"shape \(2, 3, 5\): expected \[H, W\] or \[H, W, C\]",
        ),
        (np.zeros((2, 3, 3, 1), np.uint8), r"shape \(2, 3, 3, 1\)"),
        (np.zeros((0, 3), np.uint8), r"no pixels \(3x0\)"),
        (np.zeros((2, 3), np.int16), "dtype int16, whose pixel range is ambiguous"),
        (np.full((2, 3), 1.5), r"float pixels in \[1.5, 1.5\]"),
        (np.full((2, 3), np.nan, np.float32), "NaN or infinite"),
    ],
)
def test_array_to_rgb_refuses_by_the_callers_name(pixels, words):
    from asymspec_vl.inputs.image_modes import array_to_rgb

    with pytest.raises(InvalidImageError, match=rf"^the upload .*{words}"):
        array_to_rgb(pixels, "the upload")


def test_image_to_rgb_refuses_an_unknown_mode_naming_it():
    from asymspec_vl.inputs.image_modes import image_to_rgb

    with pytest.raises(InvalidImageError, match=r"^scan.png has pixel mode 'La'"):
        image_to_rgb(Image.new("La", (2, 2)), "scan.png")
    with pytest.raises(InvalidImageError, match=r"values in \[0, 70000\]"):
        image_to_rgb(Image.fromarray(np.array([[0, 70000]], dtype=np.int32)), "x")
