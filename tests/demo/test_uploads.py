"""The demo's uploads: each refused file gets one message that names it as the user named it, states the demo's
own limit and what to do (no server path, no Pillow internals, no Pillow warning); a good file is decoded once."""

import os
import struct
import warnings
import zlib

import pytest
from asymspec_vl.demo.uploads import Upload, as_upload, load_upload
from PIL import Image

from asymspec_vl.core.errors import ImageTooLargeError, InvalidImageError

LIMITS = dict(max_pixels=16_000_000, max_bytes=10 * 2**20)


def png_header(path, width: int, height: int) -> str:
    """A PNG that declares width x height but holds no pixel data: the size check must not need to decode."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )
    return str(path)


def _refused(upload, error=InvalidImageError, **limits) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # e.g. Pillow's DecompressionBombWarning must not reach the log
        with pytest.raises(error) as e:
            load_upload(upload, **{**LIMITS, **limits})
    text = str(e.value)
    assert (
        "/" not in text.split(" ")[0] and "tmp" not in text
    )  # the user's name for the file, not a server path
    for internal in (
        "decompression bomb",
        "89478485",
        "UnidentifiedImageError",
        "Error",
    ):
        assert internal not in text
    return text


def test_too_many_pixels_names_the_file_the_limit_and_the_fix(tmp_path):
    upload = Upload(
        png_header(tmp_path / "a1b2c3", 5000, 5000), "photo.png"
    )  # stored under a server name
    text = _refused(upload, ImageTooLargeError)
    assert text.startswith(
        "photo.png is 5000×5000 = 25,000,000 pixels; this demo accepts up to 16,000,000 "
        "pixels (e.g. 4000×4000)."
    )
    assert "Resize the image" in text and "--max-image-pixels" in text


@pytest.mark.parametrize(
    "side", [12_000, 20_000]
)  # above Pillow's warning limit; above its error limit
def test_pillows_own_limits_never_show(tmp_path, side):
    text = _refused(
        Upload(png_header(tmp_path / "x.png", side, side), "huge.png"),
        ImageTooLargeError,
    )
    assert (
        text.startswith("huge.png ")
        and "this demo accepts up to 16,000,000 pixels" in text
    )


def test_a_file_over_the_size_limit(tmp_path):
    heavy = tmp_path / "heavy.png"
    heavy.write_bytes(b"\x89PNG" + bytes(3 * 2**20))
    text = _refused(
        Upload(str(heavy), "heavy.png"), ImageTooLargeError, max_bytes=2 * 2**20
    )
    assert text.startswith(
        "heavy.png is 3 MB; this demo accepts image files up to 2 MB."
    )
    assert "--max-upload-mb" in text


def test_not_an_image(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert _refused(Upload(str(notes), "notes.txt")).startswith(
        "notes.txt is not an image file: upload a PNG"
    )
    fake = tmp_path / "fake.png"
    fake.write_text("not a picture")
    assert _refused(Upload(str(fake), "fake.png")).startswith(
        "fake.png cannot be read as an image: upload a PNG"
    )
    assert _refused(None) == "There is no image yet: upload one, or click an example."


def test_a_damaged_image(tmp_path):
    good = tmp_path / "good.png"
    Image.effect_noise((64, 64), 50).convert("RGB").save(good)
    cut = tmp_path / "cut.png"
    cut.write_bytes(
        good.read_bytes()[:300]
    )  # the header is fine, the pixels are cut short
    assert _refused(Upload(str(cut), "cut.png")).startswith(
        "cut.png cannot be read as an image (the file is damaged or cut short)"
    )


def test_a_good_upload_is_decoded_to_rgb(tmp_path):
    path = tmp_path / "p.png"
    Image.new("RGBA", (30, 20), (10, 20, 30, 255)).save(path)
    image = load_upload(Upload(str(path), "p.png"), **LIMITS)
    assert (
        image.mode == "RGB"
        and image.size == (30, 20)
        and image.getpixel((0, 0)) == (10, 20, 30)
    )
    assert load_upload(str(path), **LIMITS).size == (
        30,
        20,
    )  # a plain path is named by its file name


def test_gradios_file_data_keeps_the_users_file_name(tmp_path):
    stored = tmp_path / "9f8e7d" / "image.png"
    assert as_upload(
        {"path": str(stored), "orig_name": "holiday photo.png", "url": None}
    ) == Upload(str(stored), "holiday photo.png")
    assert as_upload({"path": str(stored), "orig_name": None}) == Upload(
        str(stored), "image.png"
    )
    assert as_upload(None) is None and as_upload("") is None
    with pytest.raises(
        InvalidImageError, match="did not arrive on the server: upload it again"
    ):
        as_upload({"path": None, "url": "https://example.com/x.png"})


def _outside_paths(tmp_path, uploads):
    """Paths that name a real image outside the upload folder `uploads`, each in another disguise, and a missing one."""
    secret = tmp_path / "private" / "secret.png"
    secret.parent.mkdir()
    Image.new("RGB", (77, 55), "red").save(secret)
    link = uploads / "4a5b6c" / "cat.png"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)  # a symlink inside the upload folder pointing out of it
    dotted = str(
        uploads / os.path.relpath(secret, uploads)
    )  # uploads/../private/secret.png
    sibling = (
        tmp_path / (uploads.name + "-other") / "cat.png"
    )  # a folder whose name starts with the upload folder's
    sibling.parent.mkdir()
    Image.new("RGB", (77, 55), "red").save(sibling)
    assert ".." in dotted and os.path.isfile(dotted)
    return {
        "plain path": str(secret),
        "file data without meta": {"path": str(secret), "orig_name": "cat.png"},
        "file data with meta": {
            "path": str(secret),
            "orig_name": "cat.png",
            "meta": {"_type": "gradio.FileData"},
        },
        "symlink out": Upload(str(link), "cat.png"),
        "dot-dot": Upload(dotted, "cat.png"),
        "missing": Upload(str(secret.with_name("missing.png")), "cat.png"),
        "a sibling folder of the same prefix": Upload(str(sibling), "cat.png"),
        "the folder itself": Upload(str(uploads), "cat.png"),
        "a folder in it": Upload(str(link.parent), "x.png"),
        "NUL byte": Upload(str(uploads / "a\0.png"), "cat.png"),
        "a long name": Upload(str(uploads / ("x" * 300 + ".png")), "cat.png"),
    }


def test_only_files_in_the_upload_folders_are_opened_and_every_refusal_says_the_same(
    tmp_path,
):
    from asymspec_vl.demo.service import DemoService
    from asymspec_vl.demo.uploads import NOT_ARRIVED, served

    uploads = tmp_path / "uploads"
    uploads.mkdir()
    inside = uploads / "1f2e" / "photo.png"
    inside.parent.mkdir()
    Image.new("RGB", (30, 20), "white").save(inside)
    service = DemoService(None, upload_folders=[uploads])
    assert service.load(Upload(str(inside), "photo.png")).size == (30, 20)
    assert served(
        Upload(str(uploads / "1f2e" / ".." / "1f2e" / "photo.png"), "p.png"), [uploads]
    ) == Upload(
        str(inside.resolve()), "p.png"
    )  # resolved: the file the check saw is the file opened
    for case, payload in _outside_paths(tmp_path, uploads).items():
        with pytest.raises(InvalidImageError) as e:
            service.load(payload)
        assert str(e.value) == NOT_ARRIVED, (
            case
        )  # nothing about whether the file exists, its size or kind
        with pytest.raises(InvalidImageError):
            served(as_upload(payload), [uploads])


def test_the_default_folders_are_gradios_upload_folder_and_the_examples(
    tmp_path, monkeypatch
):
    from asymspec_vl.demo.service import DemoService
    from asymspec_vl.demo.uploads import EXAMPLES_DIR, NOT_ARRIVED

    monkeypatch.setenv(
        "GRADIO_TEMP_DIR", str(tmp_path / "gradio-uploads")
    )  # as Gradio reads it
    uploaded = tmp_path / "gradio-uploads" / "0a1b" / "p.png"
    uploaded.parent.mkdir(parents=True)
    Image.new("RGB", (30, 20), "white").save(uploaded)
    elsewhere = tmp_path / "p.png"
    Image.new("RGB", (30, 20), "white").save(elsewhere)
    service = DemoService(None)
    assert service.load(str(uploaded)).size == (30, 20)
    assert service.load(str(EXAMPLES_DIR / "chart.png")).size == (256, 192)
    with pytest.raises(InvalidImageError, match=f"^{NOT_ARRIVED}$"):
        service.load(str(elsewhere))


@pytest.mark.parametrize("fmt", ["QOI", "DDS", "broken DDS"])
def test_a_file_in_a_format_the_demo_does_not_read_is_one_message(tmp_path, fmt):
    path = tmp_path / "photo.png"  # named as an image the demo reads
    if (
        fmt == "broken DDS"
    ):  # a DDS header with pixel-format flags Pillow does not know: NotImplementedError
        dds = bytearray(struct.pack("<4sI", b"DDS ", 124) + bytes(120))
        struct.pack_into("<III", dds, 8, 0x1007, 8, 8)
        struct.pack_into("<II", dds, 76, 32, 0x400000)
        path.write_bytes(bytes(dds))
    else:
        Image.new("RGB", (8, 8), "red").save(path, format=fmt)
    assert _refused(Upload(str(path), "photo.png")) == (
        "photo.png cannot be read as an image: upload a PNG, JPEG, "
        "WebP, BMP, GIF or TIFF image."
    )


@pytest.mark.parametrize("name", ["PHOTO.PNG", "Scan.JPG", "chart.Tiff"])
def test_upper_case_suffixes_are_images_too(tmp_path, name):
    path = tmp_path / name
    Image.new("RGB", (30, 20), "white").save(
        path,
        format={"PNG": "PNG", "JPG": "JPEG", "TIFF": "TIFF"}[
            name.rsplit(".", 1)[1].upper()
        ],
    )
    assert load_upload(Upload(str(path), name), **LIMITS).size == (30, 20)


def test_a_replaced_file_is_decoded_again(tmp_path):
    """The decoded-upload cache is keyed by the file's path, size and modification time: a file replaced under
    the same path (a new upload Gradio stored there) is not answered with the old pixels."""
    from asymspec_vl.demo.service import DemoService

    path = tmp_path / "image.png"
    Image.new("RGB", (30, 20), "white").save(path)
    service = DemoService(None, upload_folders=[tmp_path])
    assert service.load(str(path)).size == (30, 20)
    Image.new("RGB", (40, 10), "black").save(path)
    st = path.stat()
    os.utime(
        path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9)
    )  # a clock tick later, whatever the file system
    assert service.load(str(path)).size == (40, 10)
    assert service.load(str(path)) is service.load(str(path))  # unchanged: decoded once
