"""Load and validate request images (path, bytes, PIL or numpy) into RGB PIL images, with typed errors.
How each pixel mode becomes RGB: image_modes.py. A multi-frame file (GIF, APNG, TIFF) gives its first frame;
an EXIF orientation is applied (the model sees the image upright, as a viewer shows it). Given the drafter
processor's size rule (`fit`, image_fit.py), a large image is decoded / reduced near the size the processor uses.
Only the file formats of IMAGE_FORMATS are decoded: Pillow's other plugins (QOI, DDS, BLP, EPS through
Ghostscript, ...) are never reached, and any failure of a decoder is an InvalidImageError."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import warnings
from pathlib import Path

from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ..core.errors import ImageTooLargeError, InvalidImageError
from ..core.limits import LIMITS
from .image_fit import ORIGINAL_SIZE, Fit, draft, reduced
from .image_modes import array_to_rgb, image_to_rgb

MAX_PIXELS = LIMITS.image_pixels  # larger images are refused before they are decoded
MAX_FILE_BYTES = LIMITS.image_bytes
# The file formats the product reads (Pillow's format names; JPEG's opener also opens cameras' MPO files).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
URL_SCHEME = re.compile(
    r"^[A-Za-z][A-Za-z0-9+.-]*://"
)  # http://, https://, file://, s3:// ...


def load_image(
    image,
    max_pixels: int = MAX_PIXELS,
    max_bytes: int = MAX_FILE_BYTES,
    fit: Fit | None = None,
) -> Image.Image:
    """Return a fully decoded RGB copy of `image`; raise InvalidImageError / ImageTooLargeError. fit: the
    drafter processor's size rule (image_fit.processor_fit): a large image comes back near that size."""
    if image is None:
        raise InvalidImageError("no image was given")
    if isinstance(image, Image.Image):
        return _checked(image, max_pixels, "the PIL image", fit)
    if _is_array(image):
        if image.ndim >= 2:
            _check_size((image.shape[1], image.shape[0]), max_pixels, "the array")
        return reduced(array_to_rgb(image, "the array"), fit)
    if isinstance(image, (bytes, bytearray, memoryview)):
        data, name = bytes(image), "the image bytes"
    elif isinstance(image, (str, os.PathLike)):
        data, name = _read_file(image, max_bytes), str(image)
    else:
        raise InvalidImageError(
            f"unsupported image type {type(image).__name__}: "
            "give a path, bytes, a PIL image or a numpy array"
        )
    if len(data) > max_bytes:
        raise ImageTooLargeError(
            f"{name} is {len(data)} bytes; the limit is {max_bytes}"
        )
    return _decode(data, max_pixels, name, fit)


def _read_file(image: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of the regular file at `image`; InvalidImageError saying what else it is (a URL, missing, a
    folder, a FIFO or device, unreadable), ImageTooLargeError over max_bytes."""
    path = Path(image)
    if isinstance(image, str) and URL_SCHEME.match(image):
        raise InvalidImageError(
            f"{image} is a URL: images are read from local files; download it first and give "
            "its path or its bytes"
        )
    try:  # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as e:
        raise InvalidImageError(f"image file not found: {path}") from e
    except IsADirectoryError as e:
        raise InvalidImageError(f"{path} is a directory, not an image file") from e
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise InvalidImageError(
                f"{path} cannot be an image file: the path, or a part of it, is longer than "
                "the file system allows (255 bytes a part)"
            ) from e
        raise InvalidImageError(f"{path} cannot be read: {e.strerror or e}") from e
    except ValueError as e:  # a NUL byte in the path
        raise InvalidImageError(f"{path!r} is not a valid file path: {e}") from e
    mode = os.fstat(fd)  # before fdopen, which refuses a directory with its own OSError
    if stat.S_ISDIR(mode.st_mode):
        os.close(fd)
        raise InvalidImageError(f"{path} is a directory, not an image file")
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(mode.st_mode):
            raise InvalidImageError(
                f"{path} is not a regular file (a FIFO, a socket or a device): give an image "
                "file"
            )
        if mode.st_size > max_bytes:
            raise ImageTooLargeError(
                f"{path} is {mode.st_size} bytes; the limit is {max_bytes}"
            )
        try:
            return f.read(max_bytes + 1)
        except OSError as e:
            raise InvalidImageError(f"{path} cannot be read: {e.strerror or e}") from e


def image_digest(image: Image.Image) -> str:
    """Content hash of the decoded pixels (size + mode + bytes), stable across file formats."""
    h = hashlib.sha256(f"{image.mode}:{image.size}".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def _is_array(x) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "shape")


def _decode(
    data: bytes, max_pixels: int, name: str, fit: Fit | None = None
) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as probe:
                _check_size(probe.size, max_pixels, name)  # before any pixel is decoded
            with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as img:
                stored = img.size  # before a draft changes it
                draft(
                    img, fit
                )  # a large JPEG decodes at a DCT scale near the processor's size
                img.load()
                return _checked(img, max_pixels, name, fit, stored)
    except (
        InvalidImageError
    ):  # our own size checks (ImageTooLargeError is a ValueError): keep their type
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageTooLargeError(f"{name} is too large to decode safely: {e}") from e
    except UnidentifiedImageError as e:
        raise InvalidImageError(
            f"{name} is not an image file this toolkit reads ({', '.join(IMAGE_FORMATS)})"
        ) from e
    except Exception as e:  # a decoder's failure on a corrupt file: OSError, but also IndexError, struct.error, ...
        raise InvalidImageError(
            f"{name} is corrupt or truncated: {type(e).__name__}: {e}"
        ) from e


def _check_size(size: tuple[int, int], max_pixels: int, name: str) -> None:
    w, h = size
    if w <= 0 or h <= 0:
        raise InvalidImageError(f"{name} has no pixels ({w}x{h})")
    if w * h > max_pixels:
        raise ImageTooLargeError(
            f"{name} has {w}x{h} = {w * h} pixels; the limit is {max_pixels}"
        )


def _upright(img: Image.Image) -> Image.Image:
    """img turned as its EXIF orientation says (ImageOps.exif_transpose), or img itself when it is upright (no
    full-size copy)."""
    if img.getexif().get(ExifTags.Base.Orientation, 1) not in range(2, 9):
        return img
    return ImageOps.exif_transpose(img)


def _checked(
    img: Image.Image,
    max_pixels: int,
    name: str,
    fit: Fit | None = None,
    stored: tuple[int, int] | None = None,
) -> Image.Image:
    _check_size(img.size, max_pixels, name)
    try:  # reduced as decoded where the mode allows (no full-size copy follows), else after the RGB conversion
        w, h = stored or img.size
        turned = img.getexif().get(ExifTags.Base.Orientation, 1) in (
            5,
            6,
            7,
            8,
        )  # a quarter turn swaps the sides
        out = reduced(image_to_rgb(reduced(_upright(img), fit), name), fit)
        out.info.setdefault(
            ORIGINAL_SIZE, (h, w) if turned else (w, h)
        )  # kept by later copies (convert)
        return out
    except InvalidImageError:
        raise
    except (
        Exception
    ) as e:  # a corrupt EXIF block, a pixel access the decoder cannot serve, ...
        raise InvalidImageError(
            f"{name} cannot be converted to RGB: {type(e).__name__}: {e}"
        ) from e
