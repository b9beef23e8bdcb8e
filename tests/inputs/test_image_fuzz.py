"""A seeded mutation fuzz of images.load_image: byte flips, cuts and splices of real PNG / JPEG / WebP / GIF /
BMP / TIFF files and of files in formats the toolkit does not read (QOI, DDS, BLP, TGA, ...), and headers of
those formats with random bodies. Every input gives an RGB image or an InvalidImageError, never another type."""

import io
import random
import struct

import pytest
from PIL import Image

from asymspec_vl.core.errors import InvalidImageError
from asymspec_vl.inputs.images import load_image

SEED, PER_SEED_FILE = 22, 90  # CI-sized: about 2,000 inputs, a few seconds


def _picture() -> Image.Image:
    rng = random.Random(SEED)
    return Image.frombytes(
        "RGB", (24, 16), bytes(rng.randrange(256) for _ in range(24 * 16 * 3))
    )


def _seed_files() -> dict[str, bytes]:
    """Real files: the formats the toolkit reads, in several flavours, and some it does not."""
    pic, files = _picture(), {}
    for name, fmt, kw, mode in [
        ("png", "PNG", {}, "RGB"),
        ("png-rgba", "PNG", {}, "RGBA"),
        ("png-16", "PNG", {}, "I;16"),
        ("png-palette", "PNG", {}, "P"),
        ("jpeg", "JPEG", {"quality": 80}, "RGB"),
        ("jpeg-prog", "JPEG", {"progressive": True}, "L"),
        ("webp", "WEBP", {"quality": 70}, "RGB"),
        ("webp-lossless", "WEBP", {"lossless": True}, "RGBA"),
        ("gif", "GIF", {}, "P"),
        ("bmp", "BMP", {}, "RGB"),
        ("tiff", "TIFF", {}, "RGB"),
        ("tiff-lzw", "TIFF", {"compression": "tiff_lzw"}, "RGB"),
        ("tiff-packbits", "TIFF", {"compression": "packbits"}, "L"),
        # formats the toolkit does not read (Pillow does)
        ("qoi", "QOI", {}, "RGB"),
        ("dds", "DDS", {}, "RGB"),
        ("blp", "BLP", {}, "P"),
        ("tga", "TGA", {}, "RGB"),
        ("pcx", "PCX", {}, "RGB"),
        ("ppm", "PPM", {}, "RGB"),
        ("ico", "ICO", {}, "RGBA"),
        ("sgi", "SGI", {}, "RGB"),
        ("im", "IM", {}, "RGB"),
    ]:
        buf = io.BytesIO()
        pic.convert(mode).save(buf, format=fmt, **kw)
        files[name] = buf.getvalue()
    return files


def _headers(rng: random.Random) -> list[bytes]:
    """Headers of formats the toolkit does not read, with random fields and bodies (the shapes that raised
    IndexError, NotImplementedError and BLPFormatError in issue 22)."""

    def tail(n=64):
        return bytes(rng.randrange(256) for _ in range(n))

    out = []
    for _ in range(40):
        w, h = rng.randrange(1, 64), rng.randrange(1, 64)
        out.append(
            b"qoif"
            + struct.pack(">IIBB", w, h, rng.choice((3, 4)), rng.randrange(2))
            + tail()
        )
        dds = bytearray(struct.pack("<4sI", b"DDS ", 124) + bytes(120) + tail(64))
        struct.pack_into("<III", dds, 8, 0x1007, h, w)  # flags, height, width
        struct.pack_into(
            "<II4s",
            dds,
            76,
            32,
            rng.choice((0x4, 0x40, 0x41, 0x20000)),
            rng.choice(
                (b"DXT1", b"DXT5", b"DX10", b"ATI2", b"BC5U", b"\0\0\0\0", tail(4))
            ),
        )
        out.append(bytes(dds))
        out.append(
            rng.choice((b"BLP1", b"BLP2"))
            + struct.pack(
                "<IBBBBII",
                rng.randrange(3),
                rng.randrange(9),
                rng.randrange(3),
                rng.randrange(9),
                0,
                w,
                h,
            )
            + tail()
        )
        out.append(
            b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n" + tail()
        )  # never to Ghostscript
        out.append(tail(rng.randrange(1, 80)))
    return out


def _mutants(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        b, kind = bytearray(data), rng.randrange(4)
        if kind == 0:  # flip a few bytes, most of them in the header
            for _ in range(rng.randrange(1, 5)):
                i = (
                    rng.randrange(min(len(b), 96))
                    if rng.random() < 0.7
                    else rng.randrange(len(b))
                )
                b[i] ^= (
                    1 << rng.randrange(8)
                    if rng.random() < 0.5
                    else rng.randrange(1, 256)
                )
        elif kind == 1:  # cut short
            del b[rng.randrange(1, len(b)) :]
        elif kind == 2:  # a run overwritten with an extreme value
            i = rng.randrange(len(b))
            b[i : i + rng.randrange(1, 9)] = bytes(
                [rng.choice((0, 0xFF, 0x7F, 0x80))]
            ) * rng.randrange(1, 9)
        else:  # bytes inserted
            i = rng.randrange(len(b))
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        out.append(bytes(b))
    return out


def _inputs() -> list[tuple[str, bytes]]:
    rng = random.Random(SEED)
    cases = []
    for name, data in _seed_files().items():
        cases += [
            (f"{name} mutant {i}", m)
            for i, m in enumerate(_mutants(data, rng, PER_SEED_FILE))
        ]
    cases += [(f"foreign header {i}", h) for i, h in enumerate(_headers(rng))]
    return cases


def test_every_corrupt_or_foreign_input_is_an_image_or_an_invalid_image_error():
    escaped = []
    for name, data in _inputs():
        try:
            image = load_image(data, max_pixels=1_000_000)
        except InvalidImageError:
            continue
        except (
            Exception
        ) as e:  # the bug: a decoder's own exception type reaches the caller
            escaped.append(f"{name}: {type(e).__name__}: {e}")
            continue
        assert image.mode == "RGB" and image.width * image.height > 0, name
    assert not escaped, f"{len(escaped)} inputs escaped untyped:\n" + "\n".join(
        escaped[:20]
    )


@pytest.mark.parametrize(
    "name", ["qoi", "dds", "blp", "tga", "pcx", "ppm", "ico", "sgi", "im"]
)
def test_formats_outside_the_allow_list_are_refused_whole(name):
    with pytest.raises(
        InvalidImageError, match="is not an image file this toolkit reads"
    ):
        load_image(_seed_files()[name])


@pytest.mark.parametrize(
    "name",
    [
        "png",
        "png-16",
        "jpeg",
        "webp",
        "webp-lossless",
        "gif",
        "bmp",
        "tiff",
        "tiff-lzw",
    ],
)
def test_the_formats_it_reads_still_decode(name):
    assert load_image(_seed_files()[name]).size == (24, 16)
