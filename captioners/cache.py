"""A cache around any captioner, keyed by the image's content hash, so each caption / OCR result is made once."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from asymspec_vl.inputs.images import image_digest, load_image

from .base import Captioner, ImageText

logger = logging.getLogger(__name__)


class CachedCaptioner:
    """Wraps a captioner: the first describe() of an image computes, later ones (same pixels) read the cache.

    The key is sha256(captioner name + hash of the decoded pixels), so the same pixels hit whatever the file
    name or lossless format, while another captioner or other settings (part of its name) miss. directory=None keeps
    the cache in memory only; with a directory, entries are JSON files written atomically, shared between
    runs. Calls without an image (key-only lookups) pass straight through.
    """

    def __init__(self, inner: Captioner, directory: str | Path | None = None):
        self.inner = inner
        self.name = inner.name
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[str, ImageText] = {}
        self.hits = 0
        self.misses = 0
        self._write_failed = False  # a failed write was logged

    def cache_key(self, image) -> str:
        """sha256 of the captioner's name and the decoded image's pixel hash."""
        digest = image_digest(load_image(image))
        return hashlib.sha256(f"{self.inner.name}\n{digest}".encode()).hexdigest()

    def describe(self, image=None, key: str | None = None) -> ImageText:
        if image is None:
            return self.inner.describe(None, key)
        img = load_image(image)
        ck = self.cache_key(img)
        found = self._memory.get(ck) or self._read(ck)
        if found is not None:
            self.hits += 1
            self._memory[ck] = found
            return found
        self.misses += 1
        result = self.inner.describe(img, key)
        self._memory[ck] = result
        self._write(ck, result)
        return result

    def _path(self, ck: str) -> Path | None:
        return (
            self.directory / ck[:2] / f"{ck}.json"
            if self.directory is not None
            else None
        )

    def _read(self, ck: str) -> ImageText | None:
        path = self._path(ck)
        if path is None or not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # an unreadable entry is recomputed and overwritten
        return (
            ImageText.from_dict(entry) if _well_formed(entry) else None
        )  # so is one of the wrong shape

    def _write(self, ck: str, result: ImageText) -> None:
        """Best effort: a write that fails (no space, a read-only folder, a directory in the way) leaves no temp
        file and costs only the entry (the result stays in memory); it is logged once per cache."""
        path = self._path(ck)
        if path is None:
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(result.to_dict(), f)
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if not self._write_failed:
                self._write_failed = True
                logger.warning(
                    "the caption cache cannot write %s (%s): results are kept in memory only; later "
                    "failures are not logged",
                    path,
                    e,
                )


def _well_formed(entry) -> bool:
    """Whether a cache file holds an ImageText.to_dict(): text fields are str, OCR boxes {box [4, 2], text,
    confidence}."""
    if not isinstance(entry, dict) or not all(
        isinstance(entry.get(k, ""), str) for k in ("caption", "ocr", "source")
    ):
        return False
    boxes = entry.get("ocr_boxes", [])
    return isinstance(boxes, list) and all(_well_formed_box(b) for b in boxes)


def _well_formed_box(box) -> bool:
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    corners = box.get("box") if isinstance(box, dict) else None
    return (
        isinstance(corners, list)
        and len(corners) == 4
        and all(
            isinstance(p, list) and len(p) == 2 and all(number(x) for x in p)
            for p in corners
        )
        and isinstance(box.get("text"), str)
        and number(box.get("confidence", 1.0))
    )
