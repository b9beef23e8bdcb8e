"""The embedded default models: what `--drafter embedded` / `--verifier embedded` resolve to, offline."""

from __future__ import annotations

import os
from pathlib import Path

EMBEDDED = "embedded"


def cache_dir() -> Path:
    return Path(os.environ.get("ASYMSPEC_VL_CACHE", Path.home() / ".cache" / "asymspec-vl"))


def embedded_models() -> dict[str, str]:
    """Paths of the embedded drafter / verifier / text drafter (tiny random models, written once)."""
    from .tiny import write_tiny_models

    root = cache_dir() / "tiny-models"
    if not (root / "tiny_models.json").is_file():
        write_tiny_models(root)
    return {"drafter": str(root / "vl_drafter"), "verifier": str(root / "verifier"),
            "text_drafter": str(root / "text_drafter")}


def resolve(role: str, name: str | None) -> str | None:
    """`embedded` -> the embedded model for `role` (drafter, verifier, text_drafter); else unchanged."""
    return embedded_models()[role] if name == EMBEDDED else name
