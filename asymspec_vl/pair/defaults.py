"""The embedded default models: what `--drafter embedded` / `--verifier embedded` resolve to, offline."""

from __future__ import annotations

import os
from pathlib import Path

from .model_source import EMBEDDED, Weights, locate  # EMBEDDED: the name callers read from here


def cache_dir() -> Path:
    return Path(os.environ.get("ASYMSPEC_VL_CACHE", Path.home() / ".cache" / "asymspec-vl"))


def embedded_models() -> dict[str, str | None]:
    """Paths of the embedded pair: the trained toy-world drafter (tiny Qwen3-VL) and verifier (tiny Qwen3)
    shipped in asymspec_vl/toy/pair (see its manifest.json); text_drafter None: the VL drafter reads text
    for SD."""
    from ..toy import pair_paths

    return pair_paths()


def resolve(role: str, name: str | None, weights: Weights = Weights.REQUIRED) -> str | None:
    """`embedded` -> the embedded model for `role` (drafter, verifier, text_drafter); None -> None; any other
    name as model_source.locate checks it (a ModelPairError if it cannot load; weights: model_source.Weights)."""
    if name is None:
        return None
    if name == EMBEDDED:
        return embedded_models()[role]
    return locate(role, name, weights)
