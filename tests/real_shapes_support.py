"""The real-shape folders of a test run (asymspec_vl/toy/real_vocab.py), built on first use under one session folder
and handed out by family, role or pair name (conftest.py's `real_shapes` fixture)."""

from __future__ import annotations

import threading
from pathlib import Path

from asymspec_vl.toy.real_vocab import (
    REAL_PAIRS,
    real_model_dir,
    real_tokenizer,
    real_tokenizer_dir,
)


class RealShapes:
    """Paths of the real-shape tokenizer and model folders under `cache`, each built once (on first ask)."""

    def __init__(self, cache: Path):
        self.cache = Path(cache)
        self._lock = threading.Lock()
        self._tokenizers = {}

    def tokenizer_dir(self, family: str) -> Path:
        with self._lock:
            return real_tokenizer_dir(family, self.cache)

    def tokenizer(self, family: str):
        """The family's tokenizer (one object per run: treat it as read-only)."""
        with self._lock:
            if family not in self._tokenizers:
                self._tokenizers[family] = real_tokenizer(family, self.cache)
            return self._tokenizers[family]

    def model_dir(self, family: str, role: str, seed: int = 0) -> Path:
        with self._lock:
            return real_model_dir(family, role, self.cache, seed)

    def pair(self, name: str, seed: int = 0) -> tuple[Path, Path]:
        """(drafter folder, verifier folder) of a REAL_PAIRS name."""
        drafter, verifier = REAL_PAIRS[name]
        return self.model_dir(drafter, "drafter", seed), self.model_dir(
            verifier, "verifier", seed + 1
        )
