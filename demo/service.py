"""What the demo's events do, without Gradio: check the inputs, describe an image, stream the answers, stop."""

from __future__ import annotations

import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence

from PIL import Image

from asymspec_vl.api import trace_pieces
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError, EmptyQuestionError
from asymspec_vl.core.limits import LIMITS
from asymspec_vl.core.stop_strings import StreamedText
from asymspec_vl.pair.model_names import is_embedded
from asymspec_vl.timing import impossible_speedup_note
from asymspec_vl.toy.draw import looks_like_scene

from . import render
from .board import BASELINES, FAILED, STOPPED, Board, Outputs
from .controls import sliders
from .streaming import Cancelled, Snapshot, stream_generate
from .uploads import Upload, as_upload, load_upload, served, upload_folders

DEFAULT_MAX_IMAGE_PIXELS = LIMITS.demo_image_pixels
DEFAULT_MAX_FILE_BYTES = LIMITS.demo_image_bytes
DECODED_KEPT = 4  # decoded uploads kept: the upload's describe and the answers after it decode the file once
SESSIONS_KEPT = 256  # browser sessions whose state is kept (Gradio's session states, the armed Stop signals)


class DemoService:
    """The models and limits behind the page. One generation at a time (the models are shared)."""

    def __init__(
        self,
        vl,
        base_config: AsymSpecConfig | None = None,
        captioner=None,
        captioner_label: str = "",
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        upload_folders: Sequence[str | os.PathLike] | None = None,
    ):
        """captioner: an asymspec_vl.captioners.Captioner (describe(image) -> ImageText with .caption, .ocr)
        that prefills the verifier's view on upload, captioner_label says which in words ("OCR by EasyOCR;
        no captioner"); None leaves the view for the user to type. upload_folders: the only folders images are
        opened from (default: uploads.upload_folders(), Gradio's upload folder and demo/examples)."""
        self.vl, self.base_config, self.captioner = (
            vl,
            base_config or AsymSpecConfig(),
            captioner,
        )
        self.captioner_label = captioner_label
        self.max_image_pixels, self.max_file_bytes = max_image_pixels, max_file_bytes
        self.upload_folders = (
            tuple(upload_folders) if upload_folders is not None else None
        )
        self.sliders = sliders(
            self.base_config
        )  # the page's decoding sliders and their ranges
        self.lock = threading.Lock()
        self.stops = StopSignals()
        self._decoded: OrderedDict[tuple, Image.Image] = (
            OrderedDict()
        )  # (path, size, mtime) -> RGB image
        self._decoded_lock = threading.Lock()
        names = getattr(vl, "names", None) or {}
        self.toy = is_embedded(names.get("drafter")) and is_embedded(
            names.get("verifier"), "verifier"
        )

    def load(self, image) -> Image.Image:
        """The uploaded image (anything uploads.as_upload takes), checked against the demo's limits and decoded
        once per file (the models and captioners only read it). Only files inside the upload folders are opened."""
        upload = as_upload(image)
        if upload is not None:
            upload = served(
                upload,
                upload_folders()
                if self.upload_folders is None
                else self.upload_folders,
            )
        key = _file_key(upload)
        with self._decoded_lock:
            if key in self._decoded:
                self._decoded.move_to_end(key)
                return self._decoded[key]
        image = load_upload(upload, self.max_image_pixels, self.max_file_bytes)
        if key is not None:
            with self._decoded_lock:
                self._decoded[key] = image
                while len(self._decoded) > DECODED_KEPT:
                    self._decoded.popitem(last=False)
        return image

    def config(
        self,
        K,
        beta,
        gamma,
        gate,
        max_new_tokens,
        temperature=None,
        top_p=None,
        seed=None,
    ) -> AsymSpecConfig:
        """The page's controls on top of the command line's configuration (validated by AsymSpecConfig).
        temperature / top_p None: the command line's. A sampled answer (temperature > 0) always has a seed: the
        one given, else one drawn at random here, so the page can show it and the user can repeat the answer."""
        temperature = (
            self.base_config.temperature if temperature is None else temperature
        )
        top_p = self.base_config.top_p if top_p is None else top_p
        seed = _seed(seed)
        cfg = self.base_config.replace(
            K=_as_int("K", K),
            beta=beta,
            gamma=gamma,
            gate=gate,
            max_new_tokens=_as_int("max_new_tokens", max_new_tokens),
            temperature=temperature,
            top_p=top_p,
            seed=seed,
        )
        return (
            cfg.replace(seed=secrets.randbelow(2**31))
            if cfg.samples and seed is None
            else cfg
        )

    def describe_image(self, image) -> tuple[str, str]:
        """Caption and OCR text for the verifier's view; empty (for the user to type) without a captioner."""
        img = self.load(image)
        if self.captioner is None:
            return "", ""
        with self.lock:  # a VLM captioner may share the device with the drafter
            text = self.captioner.describe(img)
        return text.caption or "", text.ocr or ""

    def answer(
        self,
        image,
        question,
        caption,
        ocr,
        K,
        beta,
        gamma,
        gate,
        max_new_tokens,
        baselines=BASELINES,
        temperature=None,
        top_p=None,
        seed=None,
        stop: threading.Event | None = None,
    ) -> Iterator[Outputs]:
        """Stream AsymSpec's answer, then each chosen baseline's, re-rendering all panels at every step; every
        method samples with the same temperature, top_p and seed (config()).
        Every input is checked before any model runs (a typed error, nothing yielded). `stop` set (the Stop
        button) ends the answer at the next step: the partial answer is kept and marked stopped, the panels not
        reached are marked not run. An error while decoding yields the board with that panel marked failed,
        then propagates."""
        cfg = self.config(
            K, beta, gamma, gate, max_new_tokens, temperature, top_p, seed
        )
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError(
                "The question is empty: type a question about the image."
            )
        unknown = set(baselines or ()) - set(BASELINES)
        if unknown:
            raise ConfigError(
                f"unknown baseline(s) {', '.join(sorted(unknown))}: choose from {', '.join(BASELINES)}"
            )
        decoded = self.load(image)
        board = Board(
            ["asymspec"] + [m for m in BASELINES if m in (baselines or ())],
            self.vl.pair.stop_ids(cfg),
            notes=self.notes(decoded, caption or "", ocr or ""),
            settings=render.settings_html(
                cfg, caption or "", ocr or "", self.vl.pair.vocabulary.line()
            ),
            speed_note=self.speed_note(cfg.K),
        )
        yield board.outputs()
        for method in board.methods:
            if (
                stop is not None and stop.is_set()
            ):  # stopped between two panels, or before the first
                board.settle(STOPPED, None)
                yield board.outputs()
                return
            # the text shown while decoding: what a stream sends (no text a stop string will cut), then the final
            text = StreamedText(
                self.vl.decode, cfg.stop, cfg.include_stop_str_in_output, cfg.min_tokens
            )
            try:
                for item in stream_generate(
                    self.vl,
                    self.lock,
                    stop,
                    image=decoded,
                    question=question,
                    caption=caption or "",
                    ocr=ocr or "",
                    method=method,
                    config=cfg,
                ):
                    if isinstance(item, Snapshot):
                        text.push(item.token_ids)
                        pieces = trace_pieces(self.vl.pair.tokenizer, item.token_ids)
                        board.snapshot(
                            method,
                            item.token_ids,
                            pieces,
                            item.sources,
                            item.stats,
                            item.elapsed_s,
                            text.sent,
                        )
                    else:
                        board.finish(
                            method,
                            item.token_ids,
                            [t.text for t in item.trace],
                            [t.source for t in item.trace],
                            item.stats,
                            item.finish_reason,
                            item.to_dict(),
                            item.text,
                        )
                    yield board.outputs()
            except Cancelled:
                board.settle(STOPPED, method)
                yield board.outputs()
                return
            except Exception:
                board.settle(FAILED, method)
                yield board.outputs()
                raise

    def notes(self, image: Image.Image, caption: str, ocr: str) -> tuple[str, ...]:
        """The warnings shown next to the answer: the verifier's view is empty; the toy pair on an image that
        is no toy scene."""
        notes = []
        if not caption.strip() and not ocr.strip():
            notes.append(
                "The verifier's view is empty: the verifier (and the Floor) read only the question, so "
                "their tokens cannot use the image. Describe the image in the Caption / OCR boxes."
            )
        if self.toy and not looks_like_scene(image):
            notes.append(
                f"This image is no toy scene ({image.width}×{image.height}): the embedded toy pair only "
                "reads its 96×32 scenes of coloured shapes carrying digits, so this answer means nothing. "
                "Start the demo with --drafter and --verifier to ask about other images."
            )
        return tuple(notes)

    def speed_note(self, K: int) -> str:
        """Why this pair cannot be faster than the Floor (its drafter costs what its verifier does), or ""."""
        if getattr(self.vl, "backend", None) is None:
            return ""
        return (impossible_speedup_note(self.vl, ["asymspec"], K) or "").removeprefix(
            "note: "
        )


class StopSignal(threading.Event):
    """Set by the Stop button, or by a new upload (`superseded`: the answer is about an image no longer shown)."""

    superseded = False


class StopSignals:
    """The Stop signal of each browser session's answer: armed when Answer is clicked (so a Stop while the answer
    waits in the queue counts), set by Stop or a new upload, dropped when the answer ends or the session closes
    (the page's unload). At most `capacity` are kept: a session armed and never answered (a tab closed before its
    answer left the queue, a script) is dropped oldest first, so a flood of sessions cannot grow the memory."""

    def __init__(self, capacity: int = SESSIONS_KEPT):
        self._signals: dict[
            str, StopSignal
        ] = {}  # insertion order: the oldest armed first
        self._lock = threading.Lock()
        self.capacity = capacity

    def arm(self, session: str) -> StopSignal:
        with self._lock:
            self._signals.pop(session, None)
            self._signals[session] = signal = StopSignal()
            while len(self._signals) > self.capacity:
                del self._signals[next(iter(self._signals))]
            return signal

    def __len__(self) -> int:
        return len(self._signals)

    def drop(self, session: str) -> None:
        """The session ended (its tab closed): its signal goes, set, so an answer still queued stops."""
        with self._lock:
            signal = self._signals.pop(session, None)
        if signal is not None:
            signal.set()

    def current(self, session: str) -> StopSignal | None:
        with self._lock:
            return self._signals.get(session)

    def stop(self, session: str, superseded: bool = False) -> None:
        with self._lock:
            signal = self._signals.get(session)
        if signal is not None:
            signal.superseded = signal.superseded or superseded
            signal.set()

    def release(self, session: str, signal: StopSignal | None) -> None:
        with self._lock:
            if signal is not None and self._signals.get(session) is signal:
                del self._signals[session]


def _file_key(upload: Upload | None) -> tuple | None:
    """What identifies an uploaded file's content: its path, size and modification time (None: no file)."""
    try:
        st = os.stat(upload.path)
    except (AttributeError, OSError, ValueError):
        return None
    return (os.path.realpath(upload.path), st.st_size, st.st_mtime_ns)


def _seed(x) -> int | None:
    """The seed box's text (or an API client's number) as a seed; empty: None (one is drawn)."""
    if isinstance(x, str):
        text = x.strip()
        if not text:
            return None
        try:
            x = int(text)
        except ValueError:
            try:
                x = float(text)
            except ValueError:
                raise ConfigError(
                    f"seed={text!r} is invalid: expected an integer"
                ) from None
    return None if x is None else _as_int("seed", x)


def _as_int(name: str, x) -> int:
    """Sliders (and number boxes) send floats; an integral float is that integer, anything else is refused by
    name."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise ConfigError(f"{name}={x!r} is invalid: expected an integer")
