"""`asymspec-vl demo`: serve the Gradio demo on the embedded models (CPU) or on real models (--drafter ...)."""

from __future__ import annotations

import argparse
import math

from asymspec_vl.commands import add_config_args, add_model_args, config_from_args, load_from_args


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not a positive number")
        return value
    return parse


def register(sub) -> None:
    from .service import DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_IMAGE_PIXELS

    p = sub.add_parser("demo", help="serve the Gradio demo: upload an image, ask a question, see where "
                                    "each token of the answer came from")
    add_model_args(p, drafter="embedded", verifier="embedded")
    add_config_args(p, K=2, max_new_tokens=64)
    g = p.add_argument_group("the verifier's view (prefilled on upload, editable in the page)")
    g.add_argument("--ocr", choices=("easyocr", "none"), default="easyocr",
                   help="OCR that fills the OCR box on upload (EasyOCR runs offline on the CPU)")
    g.add_argument("--caption-model", default="none",
                   help="VLM that fills the caption box on upload: 'none' (type it), 'drafter' (reuse the loaded "
                        "VL drafter), 'embedded', a hub id or a local path")
    g.add_argument("--caption-cache", default=None,
                   help="folder caching captions / OCR by image content (default: ~/.cache/asymspec-vl/captions)")
    g.add_argument("--no-caption-cache", action="store_true", help="keep the caption cache in memory only")
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    g.add_argument("--port", type=int, default=7860)
    g.add_argument("--max-upload-mb", type=_positive(float), default=DEFAULT_MAX_FILE_BYTES / 2**20,
                   help="largest image file accepted, in MiB")
    g.add_argument("--max-image-pixels", type=_positive(int), default=DEFAULT_MAX_IMAGE_PIXELS,
                   help="largest image accepted, in pixels (width x height)")
    p.set_defaults(func=_demo)


def build_captioner(args, vl):
    """The captioners the flags ask for, each behind a content-hash cache; None when both are off."""
    from asymspec_vl.captioners import CachedCaptioner, CombinedCaptioner
    from asymspec_vl.defaults import cache_dir

    directory = None if args.no_caption_cache else (args.caption_cache or cache_dir() / "captions")
    caption = ocr = None
    if args.caption_model != "none":
        from asymspec_vl.captioners import VLMCaptioner

        kw = dict(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
        vlm = (VLMCaptioner.from_pipeline(vl) if args.caption_model == "drafter"
               else VLMCaptioner(args.caption_model, **kw))
        caption = CachedCaptioner(vlm, directory)
    if args.ocr == "easyocr":
        from asymspec_vl.captioners import EasyOCRCaptioner

        ocr = CachedCaptioner(EasyOCRCaptioner(), directory)
    return None if caption is None and ocr is None else CombinedCaptioner(caption, ocr)


def _demo(args) -> int:
    from asymspec_vl.errors import ConfigError

    from .app import build_demo, launch
    from .service import DemoService

    cfg = config_from_args(args)  # validated before the models load
    vl = load_from_args(args)
    max_bytes = int(args.max_upload_mb * 2**20)
    service = DemoService(vl, cfg, captioner=build_captioner(args, vl), max_image_pixels=args.max_image_pixels,
                          max_file_bytes=max_bytes)
    try:
        launch(build_demo(service), host=args.host, port=args.port, max_file_bytes=max_bytes, block=True)
    except OSError as e:  # e.g. the port is taken
        raise ConfigError(f"cannot serve on {args.host}:{args.port}: {e}") from e
    return 0
