"""`asymspec-vl caption IMAGE`: print the caption (a local VLM, by default the embedded drafter) and OCR text."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("caption", help="caption and OCR one image (what the verifier would read)")
    p.add_argument("image", help="image file")
    p.add_argument("--model", default="embedded",
                   help="vision-language captioning model: hub id, local path or 'embedded' (default)")
    p.add_argument("--prompt", default=None, help="the instruction given to the captioning model")
    p.add_argument("--max-new-tokens", type=int, default=256, help="caption length limit in tokens")
    p.add_argument("--no-caption", action="store_true", help="OCR only")
    p.add_argument("--no-ocr", action="store_true", help="caption only")
    p.add_argument("--ocr-min-confidence", type=float, default=0.0, help="drop OCR boxes below this confidence")
    p.add_argument("--device", default=None, help="cpu, cuda ... (default: cuda if available)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true", help="allow the model repo to run its own code")
    p.add_argument("--cache-dir", default=None, help="caption cache folder (default: ~/.cache/asymspec-vl/captions)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    p.add_argument("--json", action="store_true", help="print the result (with the raw OCR boxes) as JSON")
    p.set_defaults(func=_caption)


def _caption(args) -> int:
    from asymspec_vl.defaults import cache_dir
    from asymspec_vl.errors import InputError
    from asymspec_vl.images import load_image

    from .base import CombinedCaptioner
    from .cache import CachedCaptioner

    if args.no_caption and args.no_ocr:
        raise InputError("--no-caption and --no-ocr together leave nothing to do")
    image = load_image(args.image)  # a bad image fails before any model loads
    directory = None if args.no_cache else (args.cache_dir or cache_dir() / "captions")
    caption = ocr = None
    if not args.no_caption:
        from .vlm import DEFAULT_PROMPT, VLMCaptioner

        caption = CachedCaptioner(VLMCaptioner(args.model, device=args.device, dtype=args.dtype,
                                               max_new_tokens=args.max_new_tokens,
                                               prompt=args.prompt or DEFAULT_PROMPT,
                                               trust_remote_code=args.trust_remote_code), directory)
    if not args.no_ocr:
        from .ocr import EasyOCRCaptioner

        ocr = CachedCaptioner(EasyOCRCaptioner(min_confidence=args.ocr_min_confidence), directory)
    result = CombinedCaptioner(caption, ocr).describe(image)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
        return 0
    if caption is not None:
        print(f"Caption:\n{result.caption}")
    if ocr is not None:
        print(("\n" if caption is not None else "") + f"OCR text:\n{result.ocr}")
    return 0
