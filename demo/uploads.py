"""The uploaded image: the folders it may come from, the name the user gave it, the demo's own limits checked before
anything is decoded, the one decode (asymspec_vl.inputs.images.load_image), and messages that name the file, the limit
and
what to do.

Why the folder check: the demo's events skip Gradio's preprocessing (see page.py), and with it Gradio's own check
that a file was uploaded; the public API (/describe, /answer) takes any path a caller writes. So the demo opens
only files that, once the path is resolved (symlinks, `..`), lie in Gradio's upload folder or in demo/examples,
and it says the same words for every other path (nothing about whether a file is there, its size or kind)."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from asymspec_vl.core.errors import ImageTooLargeError, InvalidImageError
from asymspec_vl.inputs.images import IMAGE_FORMATS, load_image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
IMAGE_KINDS = "a PNG, JPEG, WebP, BMP, GIF or TIFF image"
EXAMPLES_DIR = Path(__file__).parent / "examples"
NOT_ARRIVED = "The image did not arrive on the server: upload it again."  # every path the demo will not open


@dataclass(frozen=True)
class Upload:
    """An image file on the server (`path`, in Gradio's upload folder) and the name the user knows it by."""

    path: str
    name: str


def as_upload(payload) -> Upload | None:
    """The page's image value as it arrives (the demo's events skip Gradio's preprocessing, which opens the file
    with Pillow): Gradio's file data (path in its upload folder, the user's file name), a plain path, or None."""
    if payload is None or isinstance(payload, Upload):
        return payload
    if isinstance(payload, (str, os.PathLike)):
        return Upload(str(payload), Path(payload).name) if str(payload) else None
    path, name = (
        (payload.get("path"), payload.get("orig_name"))
        if isinstance(payload, dict)
        else (getattr(payload, "path", None), getattr(payload, "orig_name", None))
    )
    if not path:
        raise InvalidImageError(NOT_ARRIVED)
    return Upload(str(path), Path(name or path).name)


def upload_folders() -> tuple[str, ...]:
    """The folders an image the demo opens may lie in: Gradio's upload folder (GRADIO_TEMP_DIR, else
    <tmp>/gradio, as gradio.utils.get_upload_folder says: /gradio_api/upload writes there, and gr.Examples copies
    each example file there when the page shows it) and demo/examples. Gradio's examples cache
    (.gradio/cached_examples) holds cached outputs only, and the demo caches no examples."""
    from gradio.utils import get_upload_folder  # lazy: loads gradio

    return get_upload_folder(), str(EXAMPLES_DIR)


def served(upload: Upload, folders: Sequence[str | os.PathLike]) -> Upload:
    """The upload with its path resolved, if that is a regular file inside one of `folders`; otherwise
    InvalidImageError(NOT_ARRIVED), the same for a missing file, a file elsewhere, a symlink out, a directory."""
    try:
        real = os.path.realpath(upload.path)
        for folder in folders:
            root = os.path.realpath(folder)
            if (
                real != root
                and os.path.commonpath([real, root]) == root
                and os.path.isfile(real)
            ):
                return Upload(real, upload.name)
    except (
        OSError,
        ValueError,
    ):  # a NUL byte, a name too long, ...: no path the demo opens
        pass
    raise InvalidImageError(NOT_ARRIVED)


def load_upload(payload, max_pixels: int, max_bytes: int) -> Image.Image:
    """The image (anything as_upload takes) decoded once, as RGB; InvalidImageError / ImageTooLargeError with
    a message for the user."""
    upload = as_upload(payload)
    if upload is None:
        raise InvalidImageError(
            "There is no image yet: upload one, or click an example."
        )
    name = upload.name
    if (Path(name).suffix or Path(upload.path).suffix).lower() not in IMAGE_SUFFIXES:
        raise InvalidImageError(f"{name} is not an image file: upload {IMAGE_KINDS}.")
    try:
        size = os.stat(upload.path).st_size
    except OSError as e:
        raise InvalidImageError(NOT_ARRIVED) from e
    if size > max_bytes:
        raise ImageTooLargeError(
            f"{name} is {_megabytes(size)}; this demo accepts image files up to "
            f"{_megabytes(max_bytes)}. Save it smaller (e.g. as JPEG), or ask whoever runs "
            "the demo to raise --max-upload-mb."
        )
    _check_pixels(upload.path, name, max_pixels)
    try:
        return load_image(upload.path, max_pixels=max_pixels, max_bytes=max_bytes)
    except (
        ImageTooLargeError
    ) as e:  # cannot happen after the checks above unless the file changed meanwhile
        raise ImageTooLargeError(
            f"{name} is too large for this demo: upload a smaller image."
        ) from e
    except InvalidImageError as e:
        raise InvalidImageError(
            f"{name} cannot be read as an image (the file is damaged or cut short): "
            f"upload {IMAGE_KINDS}."
        ) from e


def _check_pixels(path: str, name: str, max_pixels: int) -> None:
    """Read only the header: the width and height, against the demo's pixel limit."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", Image.DecompressionBombWarning
            )  # the demo's own limit decides
            with Image.open(path, formats=IMAGE_FORMATS) as probe:
                width, height = probe.size
    except Image.DecompressionBombError as e:
        raise ImageTooLargeError(
            f"{name} has more than {2 * Image.MAX_IMAGE_PIXELS:,} pixels; "
            f"{_pixel_limit(max_pixels)}"
        ) from e
    except Exception as e:  # not one of IMAGE_FORMATS, or a header its plugin cannot parse (any exception type)
        raise InvalidImageError(
            f"{name} cannot be read as an image: upload {IMAGE_KINDS}."
        ) from e
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"{name} is {width}×{height} = {width * height:,} pixels; "
            f"{_pixel_limit(max_pixels)}"
        )


def _pixel_limit(max_pixels: int) -> str:
    side = math.isqrt(max_pixels)
    return (
        f"this demo accepts up to {max_pixels:,} pixels (e.g. {side}×{side}). Resize the image, or ask "
        "whoever runs the demo to raise --max-image-pixels."
    )


def _megabytes(n: int) -> str:
    return f"{n / 2**20:.1f}".removesuffix(".0") + " MB"
