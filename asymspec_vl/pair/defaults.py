"""The embedded default models: what `--drafter embedded` / `--verifier embedded` (or `embedded-llama`, the toy
Llama verifier of another vocabulary) resolve to, offline."""

from __future__ import annotations

import os
from pathlib import Path

from ..toy import pair_paths
from .model_source import (
    EMBEDDED,
    EMBEDDED_LLAMA,
    EMBEDDED_NAMES,
    Weights,
    locate,
)  # the names callers read here

DEFAULT_DRAFTER = (
    "Qwen/Qwen3-VL-2B-Instruct"  # the pair the API and the commands load without names
)
DEFAULT_VERIFIER = "Qwen/Qwen3-32B"
BACKENDS = ("hf", "vllm")


def cache_dir() -> Path:
    return Path(
        os.environ.get("ASYMSPEC_VL_CACHE", Path.home() / ".cache" / "asymspec-vl")
    )


def embedded_models(name: str = EMBEDDED) -> dict[str, str | None]:
    """Paths of the embedded pair `name`: the trained toy-world drafter (tiny Qwen3-VL) and verifier (tiny Qwen3;
    for `embedded-llama` the tiny Llama verifier with its own tokenizer) shipped in asymspec_vl/toy/pair (see its
    manifest.json, llama_manifest.json); text_drafter None: the VL drafter reads text for SD."""

    return pair_paths("llama" if name == EMBEDDED_LLAMA else "qwen3")


def resolve(
    role: str, name: str | None, weights: Weights = Weights.REQUIRED
) -> str | None:
    """`embedded` / `embedded-llama` -> that embedded pair's model for `role` (drafter, verifier, text_drafter);
    None -> None; any other name as model_source.locate checks it (a ModelPairError if it cannot load; `weights`:
    model_source.Weights)."""
    if name is None:
        return None
    if name in EMBEDDED_NAMES:
        return embedded_models(name)[role]
    return locate(role, name, weights)
