"""`asymspec-vl demo`: serve the Gradio demo on the embedded models (CPU) or on real models (--drafter ...)."""

from __future__ import annotations

import argparse
import errno
import math
import signal
import socket

from asymspec_vl.captioners import CachedCaptioner, CombinedCaptioner, EasyOCRCaptioner
from PIL import Image

from asymspec_vl.commands import (
    add_config_args,
    add_model_args,
    add_threads_arg,
    config_from_args,
    load_from_args,
)
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.limits import LIMITS
from asymspec_vl.pair.defaults import cache_dir
from asymspec_vl.pair.model_names import check_captioning_model
from asymspec_vl.timing import set_threads, warm_up

MAX_FILE_BYTES, MAX_PIXELS = (
    LIMITS.image_bytes,
    LIMITS.image_pixels,
)  # inputs/images.py's (numpy-free here)


def _positive(kind, most: float):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a number") from None
        if not math.isfinite(value) or value <= 0 or value > most:
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: expected a number above 0, at most {most:g}"
            )
        return value

    return parse


DEFAULT_OCR_MIN_CONFIDENCE = (
    0.3  # EasyOCR's readings of shapes and noise: ~0.12; a chart's text: >= 0.7
)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text} is out of range: expected a number from 0 to 1"
        )
    return value


def add_ocr_min_confidence_arg(g) -> None:
    """--ocr-min-confidence, for the demo and serve (both build their captioners with build_captioner)."""
    g.add_argument(
        "--ocr-min-confidence",
        type=_fraction,
        default=DEFAULT_OCR_MIN_CONFIDENCE,
        help="drop OCR readings EasyOCR is less sure of than this (0 keeps all): its guesses at "
        "shapes and noise score about 0.1, the text of a chart 0.7 or more",
    )


def register(sub) -> None:
    DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_IMAGE_PIXELS = (
        LIMITS.demo_image_bytes,
        LIMITS.demo_image_pixels,
    )  # service.py's

    p = sub.add_parser(
        "demo",
        help="serve the Gradio demo: upload an image, ask a question, see where "
        "each token of the answer came from",
        description="Serve the demo page. Without --drafter / --verifier it runs the embedded toy "
        "pair on the CPU, with toy scenes as examples.",
    )
    add_model_args(p, drafter="embedded", verifier="embedded")
    add_threads_arg(p)
    add_config_args(p, max_new_tokens=LIMITS.demo_answer_tokens)
    g = p.add_argument_group(
        "the verifier's view (prefilled on upload, editable in the page)"
    )
    g.add_argument(
        "--ocr",
        choices=("easyocr", "none"),
        default="easyocr",
        help="OCR that fills the OCR box on upload (EasyOCR runs offline on the CPU)",
    )
    add_ocr_min_confidence_arg(g)
    g.add_argument(
        "--caption-model",
        default="none",
        help="vision-language model that fills the caption box on upload: none (the user types it), "
        "drafter (reuse the loaded VL drafter), a hub id or a local path",
    )
    g.add_argument(
        "--caption-cache",
        default=None,
        help="folder caching captions / OCR by image content (default: ~/.cache/asymspec-vl/captions)",
    )
    g.add_argument(
        "--no-caption-cache",
        action="store_true",
        help="keep the caption cache in memory only",
    )
    g = p.add_argument_group("server")
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (0.0.0.0: every interface)",
    )
    g.add_argument("--port", type=int, default=7860, help="port to listen on")
    g.add_argument(
        "--max-upload-mb",
        type=_positive(float, MAX_FILE_BYTES / 2**20),
        default=DEFAULT_MAX_FILE_BYTES / 2**20,
        help="largest image file accepted, in MiB",
    )
    g.add_argument(
        "--max-image-pixels",
        type=_positive(int, MAX_PIXELS),
        default=DEFAULT_MAX_IMAGE_PIXELS,
        help="largest image accepted, in pixels (width × height)",
    )
    p.set_defaults(func=_demo)


def check_caption_model(args) -> None:
    """The embedded toy drafter is no captioner: refuse it (by name, or as the drafter) before anything loads."""
    model = args.drafter if args.caption_model == "drafter" else args.caption_model
    check_captioning_model(
        model, "--caption-model", "leave it at none and type the caption in the page"
    )


def build_captioner(args, vl):
    """The captioners the flags ask for, each behind a content-hash cache; None when both are off."""

    check_caption_model(args)
    directory = (
        None
        if args.no_caption_cache
        else (args.caption_cache or cache_dir() / "captions")
    )
    caption = ocr = None
    if args.caption_model != "none":
        from asymspec_vl.captioners import VLMCaptioner  # lazy: loads torch

        kw = dict(
            device=args.device,
            dtype=args.dtype,
            trust_remote_code=args.trust_remote_code,
        )
        vlm = (
            VLMCaptioner.from_pipeline(vl)
            if args.caption_model == "drafter"
            else VLMCaptioner(args.caption_model, **kw)
        )
        caption = CachedCaptioner(vlm, directory)
    if args.ocr == "easyocr":
        ocr = CachedCaptioner(
            EasyOCRCaptioner(min_confidence=args.ocr_min_confidence), directory
        )
    return None if caption is None and ocr is None else CombinedCaptioner(caption, ocr)


def captioner_label(args) -> str:
    """Which captioners prefill the verifier's view, in words for the page."""
    caption = {"none": None, "drafter": f"the VL drafter ({args.drafter})"}.get(
        args.caption_model, args.caption_model
    )
    if caption is None and args.ocr == "none":
        return "No captioner and no OCR run here: type what the verifier should read."
    ocr = f"OCR by EasyOCR (readings below {args.ocr_min_confidence:.0%} confidence left out)"
    parts = [
        ocr if args.ocr == "easyocr" else "no OCR (type the text in the image)",
        f"caption by {caption}" if caption else "no captioner (type the caption)",
    ]
    return f"Filled in on upload: {'; '.join(parts)}. Edit freely."


def check_port(host: str, port: int) -> None:
    """Fail before the models load when the address cannot be served (the port taken, an unknown host)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(
                socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
            )  # as the server binds it
            probe.bind(address)
    except OSError as e:
        raise ConfigError(f"cannot serve on {host}:{port}: {_why(e)}") from e


def _why(e: OSError) -> str:
    if isinstance(e, socket.gaierror):
        return "unknown host: pass --host with an address of this machine (127.0.0.1, 0.0.0.0 ...)"
    if e.errno == errno.EADDRINUSE:
        return "the port is in use (another demo?): choose another one with --port"
    if e.errno == errno.EACCES:
        return "permission denied (ports below 1024 need root): choose a port above 1023 with --port"
    return f"{e.strerror or e}: choose another --host / --port"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is (Gradio's blocking loop closes the server on it): a normal stop, exit 0."""


def _terminate(signum, frame):
    raise Terminated


def _demo(args) -> int:

    from asymspec_vl.core.methods import METHODS  # lazy: loads torch

    from .page import build_demo, launch  # lazy: loads gradio, torch
    from .service import DemoService  # lazy: loads torch

    cfg = config_from_args(args)  # checked before the models load
    check_caption_model(args)
    check_port(args.host, args.port)
    set_threads(args.threads, args.device)
    vl = load_from_args(args)
    warm_up(
        vl,
        list(METHODS),
        Image.new("RGB", (96, 32), "white"),
        "What is shown?",
        config=cfg,
    )  # untimed
    max_bytes = int(args.max_upload_mb * 2**20)
    service = DemoService(
        vl,
        cfg,
        captioner=build_captioner(args, vl),
        captioner_label=captioner_label(args),
        max_image_pixels=args.max_image_pixels,
        max_file_bytes=max_bytes,
    )
    demo = build_demo(service)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        print(
            f"demo: http://{args.host}:{args.port} (Ctrl+C stops it)", flush=True
        )  # Gradio's own lines
        launch(
            demo,
            host=args.host,
            port=args.port,
            max_file_bytes=max_bytes,
            block=True,
            quiet=True,
        )  # would suggest share=True, which the demo never sets
    except (
        Terminated
    ):  # it arrived outside Gradio's blocking loop (while the server started)
        demo.close()
    except OSError as e:  # Gradio found the port taken after all (by another program while the models loaded)
        raise ConfigError(
            f"cannot serve on {args.host}:{args.port}: the port is in use: choose another one "
            "with --port"
        ) from e
    return 0
