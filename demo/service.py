"""What the demo's events do, without Gradio: validate the inputs, describe an image, stream the answers."""

from __future__ import annotations

import threading
from typing import Iterator

from PIL import Image

from asymspec_vl.api import token_pieces
from asymspec_vl.config import AsymSpecConfig
from asymspec_vl.errors import ConfigError, EmptyQuestionError, InvalidImageError
from asymspec_vl.images import load_image

from . import render
from .streaming import Snapshot, stream_generate

BASELINES = ("floor", "drafter")
DEFAULT_MAX_IMAGE_PIXELS = 16_000_000
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
# answer(...) yields: AsymSpec panel, Floor panel, drafter panel (HTML), stats table (HTML), results (dict)
Outputs = tuple[str, str, str, str, dict]


class DemoService:
    """The models and limits behind the page. One generation at a time (the models are shared)."""

    def __init__(self, vl, base_config: AsymSpecConfig | None = None, captioner=None,
                 max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES):
        """captioner: an asymspec_vl.captioners.Captioner (describe(image) -> ImageText with .caption, .ocr)
        that prefills the verifier's view on upload; None leaves the view for the user to type."""
        self.vl, self.base_config, self.captioner = vl, base_config or AsymSpecConfig(), captioner
        self.max_image_pixels, self.max_file_bytes = max_image_pixels, max_file_bytes
        self.lock = threading.Lock()

    def load(self, image) -> Image.Image:
        """The uploaded image (a path from Gradio), decoded and checked against the demo's limits."""
        if image is None or (isinstance(image, str) and not image):
            raise InvalidImageError("no image: upload an image first")
        return load_image(image, max_pixels=self.max_image_pixels, max_bytes=self.max_file_bytes)

    def config(self, K, beta, gamma, gate, max_new_tokens) -> AsymSpecConfig:
        """The page's controls on top of the command line's configuration (validated by AsymSpecConfig)."""
        return self.base_config.replace(K=_as_int("K", K), beta=beta, gamma=gamma, gate=gate,
                                        max_new_tokens=_as_int("max_new_tokens", max_new_tokens))

    def describe_image(self, image) -> tuple[str, str]:
        """Caption and OCR text for the verifier's view; empty (for the user to type) without a captioner."""
        if self.captioner is None:
            return "", ""
        img = self.load(image)
        with self.lock:  # a VLM captioner may share the device with the drafter
            text = self.captioner.describe(img)
        return text.caption or "", text.ocr or ""

    def answer(self, image, question, caption, ocr, K, beta, gamma, gate, max_new_tokens,
               baselines=BASELINES) -> Iterator[Outputs]:
        """Stream AsymSpec's answer, then each chosen baseline's, re-rendering all panels at every step.
        Every input is validated before any model runs; errors are the toolkit's typed errors."""
        cfg = self.config(K, beta, gamma, gate, max_new_tokens)
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError("the question is empty: type a question about the image")
        unknown = set(baselines or ()) - set(BASELINES)
        if unknown:
            raise ConfigError(f"unknown baseline(s) {sorted(unknown)}: choose from {BASELINES}")
        img = self.load(image)
        methods = ["asymspec"] + [m for m in BASELINES if m in (baselines or ())]
        panels = {m: render.placeholder_html(m, "waiting…" if m in methods else "not run")
                  for m in ("asymspec", *BASELINES)}
        rows: dict[str, dict] = {}
        results: dict[str, dict] = {}

        def outputs() -> Outputs:
            table = render.stats_html([rows[m] for m in methods if m in rows])
            return panels["asymspec"], panels["floor"], panels["drafter"], table, dict(results)

        yield outputs()
        for method in methods:
            for item in stream_generate(self.vl, self.lock, image=img, question=question, caption=caption or "",
                                        ocr=ocr or "", method=method, config=cfg):
                if isinstance(item, Snapshot):
                    pieces = list(zip(token_pieces(self.vl.pair.tokenizer, item.token_ids), item.sources))
                    panels[method] = render.answer_html(method, pieces, "decoding…")
                    rows[method] = render.stats_row(method, item.stats, item.sources, item.elapsed_s, "running")
                else:
                    sources = [t.source for t in item.trace]
                    panels[method] = render.answer_html(method, [(t.text, t.source) for t in item.trace],
                                                        f"done ({item.finish_reason})")
                    rows[method] = render.stats_row(method, item.stats, sources, finish=item.finish_reason)
                    results[method] = item.to_dict()
                yield outputs()


def _as_int(name: str, x) -> int:
    """Sliders send floats; an integral float is that integer, anything else is refused by name."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise ConfigError(f"{name}={x!r} is invalid: expected an integer")
