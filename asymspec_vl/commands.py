"""Core subcommands (`generate`, `tiny-models`) and the model / config flags other subcommands share."""

from __future__ import annotations

import argparse
import json

from .config import BONUS_RULES, DELTA_SOURCES, GATES, AsymSpecConfig
from .methods import NAMES as METHODS


def add_model_args(p: argparse.ArgumentParser, drafter: str | None = None, verifier: str | None = None) -> None:
    from .api import BACKENDS, DEFAULT_DRAFTER, DEFAULT_VERIFIER

    g = p.add_argument_group("models")
    g.add_argument("--drafter", default=drafter or DEFAULT_DRAFTER,
                   help="VL drafter: hub id, local path, or 'embedded' (the offline default pair)")
    g.add_argument("--verifier", default=verifier or DEFAULT_VERIFIER,
                   help="text-only verifier: hub id, local path, or 'embedded'")
    g.add_argument("--text-drafter", default=None, help="SD's text drafter (default: the VL drafter on text)")
    g.add_argument("--backend", default="hf", choices=BACKENDS)
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    g.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 ...")
    g.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM backend: GPUs per model")
    g.add_argument("--trust-remote-code", action="store_true", help="allow model repos to run their own code")


def add_config_args(p: argparse.ArgumentParser, K: int = 2, max_new_tokens: int = 256) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("-K", "--K", dest="K", type=int, default=K, help="draft tokens per step")
    g.add_argument("--beta", type=float, default=1.0, help="delta-fusion weight")
    g.add_argument("--gamma", type=float, default=0.5, help="acceptance threshold")
    g.add_argument("--gate", default="cda", choices=GATES)
    g.add_argument("--lam", type=float, default=0.1, help="lambda of the 'lambda' gate")
    g.add_argument("--delta-source", default="contrastive", choices=DELTA_SOURCES)
    g.add_argument("--bonus", default="verifier", choices=BONUS_RULES)
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens)


def config_from_args(args) -> AsymSpecConfig:
    return AsymSpecConfig(K=args.K, beta=args.beta, gamma=args.gamma, gate=args.gate, lam=args.lam,
                          delta_source=args.delta_source, bonus=args.bonus, max_new_tokens=args.max_new_tokens)


def load_from_args(args):
    from .api import AsymSpecVL

    kwargs = {}
    if args.backend == "vllm":
        kwargs["tensor_parallel_size"] = args.tensor_parallel_size
    return AsymSpecVL.from_pretrained(drafter=args.drafter, verifier=args.verifier, backend=args.backend,
                                      text_drafter=args.text_drafter, device=args.device, dtype=args.dtype,
                                      trust_remote_code=args.trust_remote_code, **kwargs)


def comma_list(text: str, allowed=None, what: str = "value") -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']; with `allowed`, an unknown or missing entry is an argparse error."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {bad}; choose from {', '.join(allowed)}")
    return items


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def parse_methods(text: str) -> list[str]:
    return comma_list(text, METHODS, "method")


def register(sub) -> None:
    p = sub.add_parser("generate", help="answer one question about an image")
    p.add_argument("--image", required=True, help="image file")
    p.add_argument("--question", required=True)
    p.add_argument("--caption", default="", help="the verifier's description of the image")
    p.add_argument("--ocr", default="", help="text read from the image, for the verifier")
    p.add_argument("--methods", type=parse_methods, default=["asymspec"], help=f"comma list of {METHODS}")
    p.add_argument("--json", action="store_true", help="print one JSON object per method")
    add_model_args(p, drafter="embedded", verifier="embedded")
    add_config_args(p)
    p.set_defaults(func=_generate)

    p = sub.add_parser("tiny-models", help="write tiny random Qwen3 / Qwen3-VL models to DIR (tests, demos)")
    p.add_argument("dir")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_tiny_models)


def _generate(args) -> int:
    vl = load_from_args(args)
    cfg = config_from_args(args)
    for method in args.methods:
        res = vl.generate(args.image, args.question, caption=args.caption, ocr=args.ocr, method=method, config=cfg)
        if args.json:
            print(json.dumps(res.to_dict()))
            continue
        s = res.stats
        print(f"== {method}: {s.emitted} tokens, {s.tokens_per_s:.1f} tok/s, acceptance "
              f"{s.acceptance_rate:.2f}, mean accepted length {s.mean_accepted_length:.2f}")
        print(res.text)
    return 0


def _tiny_models(args) -> int:
    from .tiny import write_tiny_models

    paths = write_tiny_models(args.dir, seed=args.seed)
    for role, path in paths.items():
        print(f"{role}: {path}")
    return 0

