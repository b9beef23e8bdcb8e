"""An `image_url` of a chat message -> the image: data: URLs always; http(s) only from the hosts the operator
allows (--allowed-media-domains), file:// only inside the folder the operator allows
(--allowed-local-media-path), as vLLM's own server gates them.

The bytes are capped before anything is decoded (a data: URL by the length its base64 decodes to, a download as
it streams, a file by its size), then asymspec_vl.inputs.images.load_image decodes them with the pixel cap (a
decompression bomb
is refused from its header) near the size the drafter's processor uses (inputs/image_fit.py). Pixels are charged from
the headers before any decode: per request (PixelBudget, refused past it) and per server (ServerPixels, waited for).
vLLM's MediaConnector is not used: it returns decoded images, with no byte cap."""

from __future__ import annotations

import asyncio
import base64
import binascii
import ctypes
import ctypes.util
import io
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import httpx
from PIL import Image

from ..core.errors import ImageTooLargeError, InvalidImageError
from ..inputs.image_fit import Fit
from ..inputs.images import load_image
from .settings import ServeSettings


class PixelBudget:
    """The pixels one request's images may hold together (--max-request-pixels), charged from each image's header
    before it is decoded: a request of several images at the per-image cap is refused before it makes the server
    allocate them all."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def charge(self, data: bytes) -> None:
        pixels = header_pixels(data)
        if self.used + pixels > self.limit:
            raise ImageTooLargeError(
                f"the request's images hold {self.used + pixels} pixels (width × height, "
                f"summed); the limit per request is {self.limit} (--max-request-pixels)"
            )
        self.used += pixels


class ServerPixels:
    """The pixels the images of all requests may hold at once while they are decoded and encoded
    (--max-server-pixels). A request whose images do not fit beside those in flight waits, in arrival order, and
    gives its pixels back when its encoding is done. It waits rather than getting a 429/503: the pixels come back
    within seconds (a decode and an encode), a wait costs a client nothing, while a refusal would send every client
    into its retry loop (the openai SDK retries 429s); the request's own timeout still bounds the wait
    (RequestTimeoutError). A request over the whole budget cannot wait for it: ImageTooLargeError (ServeSettings
    keeps --max-request-pixels within it, so this only guards a direct caller)."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0
        self._waiting: list[
            tuple[int, asyncio.Future]
        ] = []  # (pixels, granted) of waiting requests, in arrival order

    @asynccontextmanager
    async def hold(self, pixels: int):
        if pixels > self.limit:
            raise ImageTooLargeError(
                f"the request's images hold {pixels} pixels; the server decodes at most "
                f"{self.limit} at once (--max-server-pixels)"
            )
        if pixels and (
            self._waiting or self.held + pixels > self.limit
        ):  # a request without images never waits
            await self._wait(pixels)
        else:
            self.held += pixels
        try:
            yield
        finally:
            self.held -= pixels
            self._grant()

    async def _wait(self, pixels: int) -> None:
        entry = (pixels, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except (
            asyncio.CancelledError
        ):  # the request timed out or its client left while it waited
            if (
                entry[1].done() and not entry[1].cancelled()
            ):  # granted just before: give the pixels back
                self.held -= pixels
            elif entry in self._waiting:  # _grant passes over a cancelled place
                self._waiting.remove(entry)
            self._grant()
            raise

    def _grant(self) -> None:
        """Pixels to the waiting requests at the head of the line, while they fit (first come, first served)."""
        while self._waiting and self.held + self._waiting[0][0] <= self.limit:
            pixels, granted = self._waiting.pop(0)
            if not granted.done():
                self.held += pixels
                granted.set_result(None)


def header_pixels(data: bytes) -> int:
    """width × height read from the image's header (nothing decoded); 0 when the header is unreadable (the decode
    then refuses the image with its own error)."""

    try:
        with Image.open(io.BytesIO(data)) as probe:
            return probe.size[0] * probe.size[1]
    except Exception:  # not an image: load_image says why
        return 0


def release_memory() -> None:
    """Return freed heap pages to the system (glibc's malloc_trim): after a large image's decode and processing
    its buffers are free but stay resident otherwise. A no-op where there is no glibc."""

    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


TRIM_PIXELS = 4_000_000  # a request whose images hold this many pixels returns its memory when encoded


async def fetch_image(
    url: str,
    settings: ServeSettings,
    budget: PixelBudget | None = None,
    fit: Fit | None = None,
):
    """The RGB PIL image an image_url names, charged to the request's budget before it is decoded;
    InvalidImageError / ImageTooLargeError say what is wrong."""
    data = await fetch_image_bytes(url, settings)
    if budget is not None:
        budget.charge(data)
    return await decode_image(data, settings, fit)


async def decode_image(data: bytes, settings: ServeSettings, fit: Fit | None = None):
    """Fetched bytes -> the RGB PIL image, with the per-image pixel and byte caps (off the event loop); fit: the
    drafter processor's size rule (a large image comes back near that size, inputs/image_fit.py)."""
    return await asyncio.to_thread(
        load_image, data, settings.max_image_pixels, settings.max_image_bytes, fit
    )


async def fetch_image_bytes(url: str, settings: ServeSettings) -> bytes:
    """The bytes an image_url names, capped (nothing decoded)."""
    if not isinstance(url, str) or not url:
        raise InvalidImageError("image_url.url must be a non-empty string")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return data_url_bytes(url, settings.max_image_bytes)
    if scheme in ("http", "https"):
        return await _download(url, settings)
    if scheme == "file":
        return await asyncio.to_thread(_local_file, url, settings)
    raise InvalidImageError(
        f"image_url must be a data:, http(s): or file: URL, got {_shown(url)}"
    )


def data_url_bytes(url: str, max_bytes: int) -> bytes:
    """The bytes of a base64 data: URL of an image media type."""
    header, sep, payload = url[len("data:") :].partition(",")
    if not sep:
        raise InvalidImageError("the data: URL has no ',' before its data")
    media_type, *params = header.split(";")
    if "base64" not in params:
        raise InvalidImageError(
            "the data: URL must be base64-encoded (data:image/png;base64,...)"
        )
    if media_type and not media_type.lower().startswith("image/"):
        raise InvalidImageError(
            f"the data: URL holds {media_type!r}, not an image media type"
        )
    size = base64_size(payload)
    if size > max_bytes:
        raise ImageTooLargeError(f"the image is {size} bytes; the limit is {max_bytes}")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidImageError(f"the data: URL is not valid base64: {e}") from e


def base64_size(payload: str) -> int:
    """The bytes a padded base64 payload decodes to (its '=' padding holds none), read off its length."""
    padding = min(2, len(payload) - len(payload.rstrip("=")))
    return len(payload) // 4 * 3 - padding


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """A host is allowed when "*" is listed, or it is a listed domain or a subdomain of one."""
    host = host.lower().rstrip(".")
    return any(
        d == "*" or host == d.lower() or host.endswith("." + d.lower()) for d in allowed
    )


async def _download(url: str, settings: ServeSettings) -> bytes:

    if not settings.allowed_media_domains:
        raise InvalidImageError(
            "this server does not fetch image URLs: send the image as a data: URL (the "
            "operator can allow hosts with --allowed-media-domains)"
        )
    try:
        parsed = httpx.URL(url)
        host, ascii_host = parsed.host, parsed.raw_host.decode("ascii")
    except (
        httpx.InvalidURL,
        ValueError,
        UnicodeError,
    ) as e:  # UnicodeError: a host IDNA refuses
        raise InvalidImageError(
            f"the image URL {_shown(url)} is not a valid URL: {e}"
        ) from e
    if not any(
        host_allowed(h, settings.allowed_media_domains) for h in (host, ascii_host)
    ):
        raise InvalidImageError(
            f"fetching images from {host!r} is not allowed (allowed: "
            f"{', '.join(settings.allowed_media_domains)})"
        )
    data, limit = bytearray(), settings.media_fetch_timeout_s
    try:  # the whole download within the limit (httpx's timeout is per read); redirects could leave the allowed hosts
        async with (
            asyncio.timeout(limit),
            httpx.AsyncClient(timeout=limit, follow_redirects=False) as client,
        ):
            async with client.stream("GET", parsed) as response:
                if response.status_code != 200:
                    raise InvalidImageError(
                        f"fetching {_shown(url)} gave HTTP {response.status_code}"
                    )
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > settings.max_image_bytes:
                        raise ImageTooLargeError(
                            f"the image at {_shown(url)} is over the limit of "
                            f"{settings.max_image_bytes} bytes"
                        )
    except httpx.HTTPError as e:
        raise InvalidImageError(
            f"fetching {_shown(url)} failed: {type(e).__name__}: {e}"
        ) from e
    except TimeoutError as e:
        raise InvalidImageError(
            f"fetching {_shown(url)} took over the server's {limit} s"
        ) from e
    return bytes(data)


def _local_file(url: str, settings: ServeSettings) -> bytes:
    if settings.allowed_local_media_path is None:
        raise InvalidImageError(
            "this server does not read local files: send the image as a data: URL (the "
            "operator can allow a folder with --allowed-local-media-path)"
        )
    try:
        parsed = urlparse(url)
    except ValueError as e:
        raise InvalidImageError(
            f"the image URL {_shown(url)} is not a valid URL: {e}"
        ) from e
    if parsed.netloc not in ("", "localhost"):
        raise InvalidImageError(
            f"file: URLs must name a local path, got host {parsed.netloc!r}"
        )
    name = unquote(parsed.path)
    if "\0" in name:
        raise InvalidImageError("the file: URL's path holds a NUL byte (%00)")
    root = Path(settings.allowed_local_media_path).resolve()
    try:
        path = (
            Path(name).resolve()
        )  # resolved first: "sub/../x" and symlinks are judged by where they lead
        # the refusals name the URL as the client sent it, never the resolved path or the allowed folder (the
        # server's file layout is not the client's to read)
        if not path.is_relative_to(root):
            raise InvalidImageError(
                f"the file: URL {_shown(url)} leads outside the allowed folder "
                "(--allowed-local-media-path)"
            )
        if not path.is_file():
            raise InvalidImageError(
                f"no image file at the file: URL {_shown(url)} (missing, or not a "
                "regular file)"
            )
        size = path.stat().st_size
        if size > settings.max_image_bytes:
            raise ImageTooLargeError(
                f"the image file is {size} bytes; the limit is {settings.max_image_bytes}"
            )
        return path.read_bytes()
    except OSError as e:  # a name too long, no permission, ... (strerror: the reason without the path)
        raise InvalidImageError(
            f"cannot read the file: URL {_shown(url)}: {e.strerror or type(e).__name__}"
        ) from e


def _shown(url: str) -> str:
    """A URL as an error message shows it (data: payloads and long URLs cut)."""
    return url if len(url) <= 80 else url[:77] + "..."
