"""`vllm serve`'s flags in `asymspec-vl serve`: ENGINE_FLAGS, the one declared list of those passed to the vLLM
engines (each flag -> its vllm.LLM / AsyncEngineArgs keyword, in ServeSettings.engine_kwargs); REFUSED, those that
would change what the pair is (its tokenizer, revision, chat template, speculative config), refused with the reason;
and any other flag refused by name (UnsupportedFlagError, exit 2) with a pointer to the Python API, whose keyword
arguments go to vllm.LLM. The hf backend takes only the flags it honours (--max-num-seqs: its batch)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ..commands import positive_int
from ..core.errors import ConfigError


class UnsupportedFlagError(ConfigError):
    """A command-line flag `asymspec-vl serve` does not take (a `vllm serve` flag, or an unknown one); the message
    names it, says why, and where to go instead."""


def _fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1]")
    return value


def _structured_outputs_config(text: str):
    """vLLM's StructuredOutputsConfig from its JSON (as `vllm serve --structured-outputs-config` takes it)."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object, got {type(value).__name__}"
        )
    from vllm.config import StructuredOutputsConfig  # lazy: loads vLLM

    try:
        return StructuredOutputsConfig(**value)
    except (TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
        raise argparse.ArgumentTypeError(" ".join(str(e).split())[:300]) from e


@dataclass(frozen=True)
class EngineFlag:
    """A `vllm serve` flag passed to the engines as the keyword `kwarg`. kind: a type, "switch" (store_true) or
    "toggle" (--x / --no-x); hf: the transformers backend honours it too; alias: vLLM's short form."""

    flag: str
    kwarg: str
    kind: object
    help: str
    hf: bool = False
    alias: str | None = None


# values are checked by vLLM when the engine starts (EngineArgs), as `vllm serve` checks them
ENGINE_FLAGS = (
    EngineFlag(
        "--data-parallel-size",
        "data_parallel_size",
        positive_int,
        "engine replicas, one per GPU group",
        alias="-dp",
    ),
    EngineFlag(
        "--max-model-len",
        "max_model_len",
        positive_int,
        "context length in tokens (vLLM's default: the model's own)",
    ),
    EngineFlag(
        "--gpu-memory-utilization",
        "gpu_memory_utilization",
        _fraction,
        "share of GPU memory the engine may take (vLLM's default: 0.9)",
    ),
    EngineFlag(
        "--max-num-seqs",
        "max_num_seqs",
        positive_int,
        "requests decoded at once (hf: the largest batch)",
        hf=True,
    ),
    EngineFlag(
        "--max-num-batched-tokens",
        "max_num_batched_tokens",
        positive_int,
        "tokens one engine step may hold",
    ),
    EngineFlag(
        "--enforce-eager", "enforce_eager", "switch", "no torch.compile / CUDA graphs"
    ),
    EngineFlag(
        "--structured-outputs-config",
        "structured_outputs_config",
        _structured_outputs_config,
        'for response_format / structured_outputs, as JSON, e.g. \'{"backend": "xgrammar", '
        '"disable_any_whitespace": true}\'',
    ),
    EngineFlag(
        "--quantization",
        "quantization",
        str,
        "the verifier's weight quantization method (fp8, awq, gptq, ...)",
        alias="-q",
    ),
    EngineFlag(
        "--kv-cache-dtype",
        "kv_cache_dtype",
        str,
        "the KV caches' data type (auto, fp8, ...): the verifier's and the drafter's",
    ),
    EngineFlag("--block-size", "block_size", positive_int, "tokens per KV-cache block"),
    EngineFlag(
        "--enable-prefix-caching",
        "enable_prefix_caching",
        "toggle",
        "reuse the KV of shared prompt prefixes",
    ),
    EngineFlag(
        "--enable-chunked-prefill",
        "enable_chunked_prefill",
        "toggle",
        "prefill long prompts in chunks",
    ),
    EngineFlag(
        "--seed",
        "seed",
        int,
        "the engine's seed: the draws of requests that send none (default 0)",
    ),
)

_PAIR_TOKENIZER = (
    "the pair's tokenizers are its models' own (the vocabulary map, the stop tokens and the prompts are built from "
    "them): serve a local copy of the model whose tokenizer files are the ones you want"
)
_PAIR_REVISION = (
    "the pair's files (weights, tokenizers, processor, chat templates) load at one revision: download the one you "
    "want (`huggingface-cli download ID --revision REV --local-dir DIR`) and serve DIR as --verifier / --drafter"
)
_PAIR_TEMPLATE = (
    "each model's prompt is rendered with its own chat template (x_full the drafter's, x_comp the verifier's), so "
    "one template cannot serve both: put the template in a local copy of the model (chat_template.jinja)"
)
_PAIR_SPEC = "the speculative decoding is AsymSpec's: the drafter is --drafter, its tokens per step -K"
REFUSED = {
    "--tokenizer": _PAIR_TOKENIZER,
    "--tokenizer-mode": _PAIR_TOKENIZER,
    "--tokenizer-revision": _PAIR_REVISION,
    "--revision": _PAIR_REVISION,
    "--code-revision": _PAIR_REVISION,
    "--chat-template": _PAIR_TEMPLATE,
    "--chat-template-content-format": _PAIR_TEMPLATE,
    "--speculative-config": _PAIR_SPEC,
    "--model": "the models are the pair's: --drafter (the VL drafter) and --verifier (the text-only verifier)",
    "--limit-mm-per-prompt": "the images one request may hold are --max-images",
    "--enable-lora": "LoRA adapters are not served",
    "--lora-modules": "LoRA adapters are not served",
    "--enable-auto-tool-choice": "tool calls are not served",
    "--tool-call-parser": "tool calls are not served",
    "--reasoning-parser": "reasoning parsers are not served",
}
PYTHON_API = (
    'the Python API passes any other vllm.LLM argument: AsymSpecVL.from_pretrained(drafter, verifier, backend="vllm", '
    "**kwargs) (docs/gpu-and-vllm.md)"
)


def add_engine_flags(group) -> None:
    """ENGINE_FLAGS on an argparse group; each defaults to None (vLLM's default)."""
    for f in ENGINE_FLAGS:
        names = [f.flag] + ([f.alias] if f.alias else [])
        if f.kind == "switch":
            group.add_argument(*names, action="store_true", default=None, help=f.help)
        elif f.kind == "toggle":
            group.add_argument(
                *names, action=argparse.BooleanOptionalAction, default=None, help=f.help
            )
        else:
            group.add_argument(*names, type=f.kind, default=None, help=f.help)
    # vLLM's short form of --tensor-parallel-size (a model flag of every command: commands.add_model_args)
    group.add_argument(
        "-tp", dest="tensor_parallel_size", type=int, help=argparse.SUPPRESS
    )


def engine_kwargs(args, backend: str) -> dict:
    """The engine keywords of the ENGINE_FLAGS given; on the hf backend a flag it does not honour is refused."""
    given = {f: getattr(args, f.kwarg) for f in ENGINE_FLAGS}
    given = {f: v for f, v in given.items() if v is not None}
    if backend == "hf":
        ignored = [f.flag for f in given if not f.hf]
        if ignored:
            raise UnsupportedFlagError(
                f"{', '.join(ignored)}: vLLM engine flag(s) the hf backend (transformers) does not take; "
                "serve with --backend vllm, or leave them out"
            )
    return {f.kwarg: v for f, v in given.items()}


def refuse_unknown(rest: list[str]) -> None:
    """What argparse left unread: UnsupportedFlagError naming each flag (REFUSED's reason, or what serve passes to
    vLLM and the Python API for the rest)."""
    flags = [a.split("=", 1)[0] for a in rest if a.startswith("-")]
    if not flags:
        raise UnsupportedFlagError(
            f"serve takes no positional arguments (got {' '.join(rest)}): the models are --drafter and "
            "--verifier, not `vllm serve MODEL`"
        )
    lines = [f"{f}: {REFUSED[f]}" for f in flags if f in REFUSED]
    other = [f for f in flags if f not in REFUSED]
    if other:
        passed = ", ".join(f.flag for f in ENGINE_FLAGS)
        lines.append(
            f"{', '.join(other)}: not a flag of `asymspec-vl serve`; of `vllm serve`'s engine flags it takes "
            f"{passed} (and --tensor-parallel-size, --dtype); {PYTHON_API}"
        )
    raise UnsupportedFlagError("serve does not take " + "; ".join(lines))
