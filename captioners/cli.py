"""`asymspec-vl caption IMAGE`: print the OCR text (EasyOCR) and, with --model, a caption by that vision-language
model: what the verifier would read, each part headed by what produced it."""

from __future__ import annotations

import json
import sys
from importlib import metadata

from asymspec_vl.core.errors import InputError
from asymspec_vl.inputs.images import load_image
from asymspec_vl.pair.defaults import cache_dir
from asymspec_vl.pair.model_names import check_captioning_model

from .base import CombinedCaptioner
from .cache import CachedCaptioner
from .ocr import EasyOCRCaptioner


def register(sub) -> None:
    p = sub.add_parser(
        "caption",
        help="OCR one image, and caption it with --model (what the verifier would read)",
        description="Print what the verifier would read about an image: its OCR text (EasyOCR, "
        "offline) and, with --model, a caption by that vision-language model.",
    )
    p.add_argument("image", help="image file")
    p.add_argument(
        "--model",
        default=None,
        help="vision-language model that writes the caption: hub id or local path (default: none, "
        "OCR only; the embedded toy drafter cannot caption)",
    )
    p.add_argument(
        "--prompt", default=None, help="the instruction given to the captioning model"
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=256, help="caption length limit in tokens"
    )
    p.add_argument(
        "--no-caption", action="store_true", help="OCR only, even with --model"
    )
    p.add_argument("--no-ocr", action="store_true", help="caption only")
    p.add_argument(
        "--ocr-min-confidence",
        type=float,
        default=0.0,
        help="drop OCR boxes below this confidence",
    )
    p.add_argument(
        "--device",
        default=None,
        help="cpu, cuda ... (default: cuda if available, else cpu)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 ...",
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the model repo to run its own code",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="caption cache folder (default: ~/.cache/asymspec-vl/captions)",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the cache"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result (with the raw OCR boxes) as JSON",
    )
    p.set_defaults(func=_caption)


def _caption(args) -> int:

    wants_caption = args.model is not None and not args.no_caption
    if not wants_caption and args.no_ocr:
        raise InputError(
            "nothing to do: --no-ocr leaves only the caption, and there is none without --model "
            "(or with --no-caption)"
        )
    if wants_caption:
        check_captioning_model(args.model, "--model", "leave --model out for OCR only")
    image = load_image(args.image)  # a bad image fails before any model loads
    directory = None if args.no_cache else (args.cache_dir or cache_dir() / "captions")
    caption = ocr = None
    if wants_caption:
        from .vlm import DEFAULT_PROMPT, VLMCaptioner  # lazy: loads torch

        caption = CachedCaptioner(
            VLMCaptioner(
                args.model,
                device=args.device,
                dtype=args.dtype,
                max_new_tokens=args.max_new_tokens,
                prompt=args.prompt or DEFAULT_PROMPT,
                trust_remote_code=args.trust_remote_code,
            ),
            directory,
        )
    if not args.no_ocr:
        ocr = CachedCaptioner(
            EasyOCRCaptioner(min_confidence=args.ocr_min_confidence), directory
        )
    result = CombinedCaptioner(caption, ocr).describe(image)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
        return 0
    parts = []
    if caption is not None:
        parts.append(f"Caption (by {args.model}):\n{result.caption}")
    elif not args.no_caption:
        print(
            "no caption: pass --model with a vision-language model to caption the image",
            file=sys.stderr,
        )
    if ocr is not None:
        parts.append(
            f"OCR text (by EasyOCR {metadata.version('easyocr')}):\n{result.ocr}"
        )
    print("\n\n".join(parts))
    return 0
