"""The verifier's view of a request's image: the client's caption / OCR text where it sent them, the server's
captioners (EasyOCR, a caption by a local VLM: --ocr, --caption-model) for what it left out, each behind a cache
keyed by the image's content hash. Captioners run one image at a time on a thread of their own (EasyOCR's
reader and a VLM's generate are not made for concurrent calls), so the event loop keeps serving."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

FIELDS = ("caption", "ocr")


@dataclass
class View:
    """The caption and OCR text the verifier reads, and where each came from."""

    caption: str = ""
    ocr: str = ""
    sources: dict = field(
        default_factory=dict
    )  # field -> {"from": "request" | captioner name | "none", "cache_hit"}


class ViewMaker:
    """Fills in the caption and OCR text a request left out. `captioner`: a CombinedCaptioner (its `caption` and
    `ocr` captioners, either None) or None (what the client leaves out stays empty)."""

    def __init__(self, captioner=None):
        self.captioners = {
            "caption": getattr(captioner, "caption", None),
            "ocr": getattr(captioner, "ocr", None),
        }
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="asymspec-captioner")

    async def view(self, image, caption: str | None, ocr: str | None) -> View:
        sent = {"caption": caption, "ocr": ocr}
        missing = [
            k for k in FIELDS if sent[k] is None and self.captioners[k] is not None
        ]
        made = {}
        if missing:
            made = await asyncio.get_running_loop().run_in_executor(
                self._thread, self._describe, image, missing
            )
        view = View()
        for k in FIELDS:
            if sent[k] is not None:
                setattr(view, k, sent[k])
                view.sources[k] = {"from": "request"}
            elif k in made:
                setattr(view, k, made[k][0])
                view.sources[k] = {
                    "from": self.captioners[k].name,
                    "cache_hit": made[k][1],
                }
            else:
                view.sources[k] = {"from": "none"}
        return view

    def _describe(self, image, missing: list[str]) -> dict:
        """field -> (text, whether the captioner's cache answered)."""
        out = {}
        for k in missing:
            captioner = self.captioners[k]
            hits = getattr(captioner, "hits", 0)
            text = getattr(captioner.describe(image), k)
            out[k] = (text, getattr(captioner, "hits", 0) > hits)
        return out

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
