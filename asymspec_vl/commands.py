"""Core subcommands (`generate`, `tiny-models`), the model / config flags other subcommands share, and the help
formatter every subcommand uses."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import types
import typing
from pathlib import Path

from .core.config import BONUS_RULES, DELTA_SOURCES, GATES, AsymSpecConfig
from .core.errors import ConfigError
from .core.method_names import NAMES as METHODS
from .core.parallelism import refuse_pipeline_parallelism
from .core.trace import FUSED
from .inputs.images import load_image
from .inputs.prompts import Request, checked_request
from .pair.defaults import BACKENDS, DEFAULT_DRAFTER, DEFAULT_VERIFIER
from .pair.model_source import pair_names
from .timing import impossible_speedup_note, times_floor, warm_up
from .toy.tiny import write_tiny_models


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default once, as a user types it ("a,b" for a list), and none where it says nothing
    (None, False, empty) or where the help text already states it ("default: ..."); descriptions keep their
    lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        says_nothing = (
            default is None
            or default is False
            or default is argparse.SUPPRESS
            or default in ("", [], ())
        )
        if not action.option_strings or says_nothing or "default:" in text.lower():
            return text
        if isinstance(default, (list, tuple)):
            shown = ",".join(map(str, default))
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"  # the help text is %-formatted next


def invocation() -> list[str]:
    """How this process was started, for commands printed to be run as printed: the asymspec-vl script's path
    (relative to the working folder when inside it), else `python -m asymspec_vl.cli` with this interpreter."""

    def shown(path: str) -> str:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path

    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "asymspec-vl" and script.is_file():
        return [shown(str(script))]
    return [shown(sys.executable), "-m", "asymspec_vl.cli"]


def add_model_args(
    p: argparse.ArgumentParser, drafter: str | None = None, verifier: str | None = None
) -> None:

    drafter, verifier = drafter or DEFAULT_DRAFTER, verifier or DEFAULT_VERIFIER
    g = p.add_argument_group("models")
    g.add_argument(
        "--drafter",
        default=None,
        help=f"VL drafter: hub id, local path, or 'embedded' (the offline toy pair) (default: {drafter}; "
        "embedded when --verifier is embedded or embedded-llama)",
    )
    g.add_argument(
        "--verifier",
        default=None,
        help=f"text-only verifier: hub id, local path, 'embedded', or 'embedded-llama' (a toy Llama of "
        f"another vocabulary: a cross-family pair) (default: {verifier}; embedded when --drafter is embedded)",
    )
    p.set_defaults(
        pair_defaults=(drafter, verifier)
    )  # applied by fill_pair_defaults once the flags are read
    g.add_argument(
        "--text-drafter",
        default=None,
        help="SD's text drafter: hub id or local path (default: the VL drafter, reading text)",
    )
    g.add_argument(
        "--backend",
        default="hf",
        choices=BACKENDS,
        help="hf: transformers; vllm: vLLM 0.19 with the AsymSpec patches",
    )
    g.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:1 ... (default: cuda if available, else cpu)",
    )
    g.add_argument(
        "--dtype",
        default="auto",
        help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 ...",
    )
    g.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="vLLM backend: GPUs per model",
    )
    g.add_argument(
        "--pipeline-parallel-size",
        type=int,
        default=1,
        help="not supported: any value above 1 is refused (use --tensor-parallel-size; docs/serve.md)",
    )
    g.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model repos to run their own code",
    )


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=non_negative_int,
        default=1,
        help="torch CPU threads when decoding on the CPU (tiny models decode fastest and steadiest on "
        "one; 0: torch's default)",
    )


CONFIG_CHOICES = {"gate": GATES, "delta_source": DELTA_SOURCES, "bonus": BONUS_RULES}
# Help of the decoding options (one per AsymSpecConfig field; a field without help here reads "AsymSpecConfig.<name>")
CONFIG_HELP = {
    "K": "draft tokens per step",
    "beta": "δ-fusion weight β at a rejection: argmax(t + β·δ)",
    "gamma": "acceptance threshold γ: accept iff p_t > γ_eff·p_b",
    "gate": "γ_eff: cda = γ·exp(−JSD(a‖b)) (the paper), fixed = γ, lambda = γ·exp(−λ·Δ), "
    "kl = γ·exp(−KL(a‖b))",
    "lam": "λ of the 'lambda' gate",
    "delta_source": "δ: contrastive = a − b (the paper), raw = a, scd = t − b",
    "bonus": "token after K accepted drafts: verifier = argmax(t) (the paper), fused = argmax(t + β·δ)",
    "max_new_tokens": "answer length limit in tokens",
    "stop_token_ids": "comma-separated token ids that end an answer (default: the verifier's EOS tokens)",
    "scd_alpha": "SCD's plausibility cut α (Appendix B)",
    "ignore_eos": "only --stop-token-ids end an answer, not the verifier's EOS tokens (runs to the budget)",
    "temperature": "sampling temperature τ (0: greedy, Algorithm 1 exactly; AsymSpec at τ > 0 is our extension: "
    "docs/python-api.md)",
    "top_p": "nucleus sampling: the smallest set of tokens whose probability reaches top_p (1: off)",
    "top_k": "sample among the top_k most likely tokens (0: off)",
    "min_p": "drop tokens below min_p times the most likely token's probability (0: off)",
    "seed": "seed of the sampling draws (a fixed seed repeats on one backend; none: unseeded)",
    "stop": "comma-separated stop strings; the text ends before the first one",
    "include_stop_str_in_output": "keep the stop string that ended the answer in its text",
    "min_tokens": "no stop token or stop string ends an answer before this many tokens",
    "structured_output": 'a grammar every answer follows, as JSON: {"json": SCHEMA}, {"json_object": true}, '
    '{"regex": "..."} or {"choice": [...]} (vLLM backend only)',
}


def _json_value(text: str):
    """An option's JSON value; argparse names the option in the error."""

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({e})") from None


def config_flag(field: str) -> str:
    """The option of an AsymSpecConfig field: -K, --max-new-tokens, ..."""
    return "-K" if field == "K" else "--" + field.replace("_", "-")


def _config_options() -> list[tuple[str, type, type | None]]:
    """(field, type, element type of a tuple field) of every AsymSpecConfig field, from its annotation."""

    hints, out = typing.get_type_hints(AsymSpecConfig), []
    for f in dataclasses.fields(AsymSpecConfig):
        kind = hints[f.name]
        if (
            isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
        ):  # X | None
            kind = next(k for k in typing.get_args(kind) if k is not type(None))
        element = None
        if typing.get_origin(kind) is tuple:
            kind, element = tuple, typing.get_args(kind)[0]
        out.append((f.name, kind, element))
    return out


def _comma_values(kind: type):
    """argparse type: '1, 2' -> (1, 2) of `kind`."""

    def parse(text: str) -> tuple:
        try:
            return tuple(kind(x) for x in comma_list(text))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {kind.__name__} values, got {text!r}"
            ) from None

    parse.__name__ = (
        f"{kind.__name__} list"  # argparse names the type in its error messages
    )
    return parse


def add_config_args(p: argparse.ArgumentParser, **defaults) -> None:
    """One option per AsymSpecConfig field, its default the field's (or this command's own, in `defaults`: the
    demo's shorter answers, the paper's protocol); the help shows it."""
    base = AsymSpecConfig(**defaults)
    g = p.add_argument_group("decoding")
    for field, kind, element in _config_options():
        flags, default = (
            ((config_flag(field), "--K") if field == "K" else (config_flag(field),)),
            getattr(base, field),
        )
        kw = dict(
            dest=field,
            default=default,
            help=CONFIG_HELP.get(field, f"AsymSpecConfig.{field}"),
        )
        if field in CONFIG_CHOICES:
            kw["choices"] = CONFIG_CHOICES[field]
        if kind is bool:
            kw["action"] = (
                "store_true" if default is False else argparse.BooleanOptionalAction
            )
        elif kind is tuple:
            kw["type"] = _comma_values(element)
        elif field == "structured_output":
            kw["type"] = _json_value
        else:
            kw["type"] = kind
        g.add_argument(*flags, **kw)


def fill_pair_defaults(args) -> None:
    """args.drafter / args.verifier as model_source.pair_names completes them from the command's defaults."""

    defaults = getattr(args, "pair_defaults", None)
    if defaults is not None:
        args.drafter, args.verifier = pair_names(args.drafter, args.verifier, *defaults)


def config_from_args(args) -> AsymSpecConfig:
    """The flags as an AsymSpecConfig; an invalid value is a ConfigError naming its flag (-K 0 is invalid ...)."""

    fields = [field for field, _, _ in _config_options()]
    try:
        return AsymSpecConfig(**{field: getattr(args, field) for field in fields})
    except ConfigError as e:
        for field in fields:
            prefix = f"AsymSpecConfig.{field}="
            if str(e).startswith(prefix):
                raise ConfigError(
                    f"{config_flag(field)} {str(e)[len(prefix) :]}"
                ) from None
        raise


def load_from_args(args):
    from .api import AsymSpecVL  # lazy: loads torch

    refuse_pipeline_parallelism(args.pipeline_parallel_size, "--pipeline-parallel-size")
    kwargs = {}
    if args.backend == "vllm":
        kwargs["tensor_parallel_size"] = args.tensor_parallel_size
    return AsymSpecVL.from_pretrained(
        drafter=args.drafter,
        verifier=args.verifier,
        backend=args.backend,
        text_drafter=args.text_drafter,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
        threads=getattr(args, "threads", None),
        **kwargs,
    )  # --threads 0: torch's


def comma_list(text: str, allowed=None, what: str = "value") -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']; with `allowed`, an unknown or missing entry is an argparse error."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {bad}; choose from {', '.join(allowed)}"
            )
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


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def parse_methods(text: str) -> list[str]:
    return comma_list(text, METHODS, "method")


def register(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="answer one question about an image (AsymSpec and the baselines)",
        description="Answer one question about an image. The drafter reads the image; the "
        "verifier reads only --caption and --ocr.",
    )
    p.add_argument("--image", required=True, help="image file")
    p.add_argument("--question", required=True, help="the question about the image")
    p.add_argument(
        "--caption", default="", help="the verifier's description of the image"
    )
    p.add_argument(
        "--ocr", default="", help="text read from the image, for the verifier"
    )
    p.add_argument(
        "--methods",
        type=parse_methods,
        default=["asymspec"],
        help=f"comma-separated, from: {', '.join(METHODS)}; each is warmed up first, and the Floor is "
        "timed too so that tokens/s reads as × Floor",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object per method"
    )
    add_threads_arg(p)
    add_model_args(p, drafter="embedded", verifier="embedded")
    add_config_args(p)
    p.set_defaults(func=_generate)

    p = sub.add_parser(
        "tiny-models",
        help="write tiny random Qwen3 / Qwen3-VL models to DIR (tests, demos)",
    )
    p.add_argument("dir", help="output folder")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.set_defaults(func=_tiny_models)


def _generate(args) -> int:

    cfg = config_from_args(args)
    image = load_image(
        args.image
    )  # every input is checked before any model loads (they take minutes)
    checked_request(Request(image, args.question, args.caption, args.ocr))
    vl = load_from_args(args)  # sets --threads
    if (
        not args.caption.strip()
        and not args.ocr.strip()
        and args.methods != ["drafter"]
    ):
        print(
            "note: no --caption and no --ocr: the verifier reads only the question, so its answers cannot use "
            f"the image. Describe the image with --caption / --ocr; `{shlex.join([*invocation(), 'caption'])} "
            f"{shlex.quote(args.image)}` reads its text (OCR).",
            file=sys.stderr,
        )
    timed = list(
        dict.fromkeys([*args.methods, "floor"])
    )  # the Floor is timed too: tokens/s reads as × Floor
    request = dict(caption=args.caption, ocr=args.ocr, config=cfg)
    warm_up(vl, timed, image, args.question, **request)
    results = {m: vl.generate(image, args.question, method=m, **request) for m in timed}
    floor = results["floor"].stats.tokens_per_s
    if not args.json:  # --json: each result's "vocabulary" says it
        print(f"pair: {vl.pair.vocabulary.line()}")
    for method in args.methods:
        res = results[method]
        if args.json:
            print(json.dumps(res.to_dict()))
            continue
        print(f"== {method}: {summary(method, res.stats, res.trace, floor)}")
        print(res.text)
    note = impossible_speedup_note(vl, args.methods, cfg.K)
    if note and not args.json:
        sys.stdout.flush()
        print(note, file=sys.stderr)
    return 0


def summary(method: str, stats, trace, floor_tokens_per_s: float | None = None) -> str:
    """The figures that apply to `method`: tokens/s (× Floor when the Floor's is given), acceptance and mean
    accepted length only where drafts were made, δ-fused tokens only for AsymSpec."""

    speed = (
        "tokens/s n/a"
        if stats.tokens_per_s is None
        else f"{stats.tokens_per_s:.1f} tokens/s"
    )
    ratio = (
        times_floor(stats.tokens_per_s, floor_tokens_per_s) if method != "floor" else ""
    )
    parts = [f"{stats.emitted} tokens", f"{speed} ({ratio})" if ratio else speed]
    if stats.drafted:
        parts += [
            f"acceptance {stats.acceptance_rate:.2f}",
            f"mean accepted length {stats.mean_accepted_length:.2f}",
        ]
    if method == "asymspec":
        parts.append(f"{sum(t.source == FUSED for t in trace)} δ-fused")
    return ", ".join(parts)


def _tiny_models(args) -> int:

    paths = write_tiny_models(args.dir, seed=args.seed)
    for role, path in paths.items():
        print(f"{role}: {path}")
    return 0
