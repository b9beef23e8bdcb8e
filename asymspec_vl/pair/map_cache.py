"""The vocabulary maps this process has built, keyed by the two folders' files: an engine whose core runs in the
client's process (vLLM's in-process engine client, as on the CPU build) reuses the map that ModelPair.load just
built for the same folders instead of reading both vocabularies again (~5 s at 150k tokens each)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

from ..core.vocab_align import VocabMap

KEPT = 4  # maps held at once (a process rarely serves more than one or two pairs)
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_lock = threading.Lock()
_maps: OrderedDict[tuple, VocabMap] = OrderedDict()


def _fingerprint(folder: str) -> tuple | None:
    """(name, size, mtime) of every file of a local folder but its weights; None for a hub name (never cached)."""
    path = Path(folder)
    if not path.is_dir():
        return None
    return tuple(
        (e.name, e.stat().st_size, e.stat().st_mtime_ns)
        for e in sorted(os.scandir(path), key=lambda e: e.name)
        if e.is_file() and not e.name.endswith(_WEIGHTS)
    )


def key(drafter: str, verifier: str, trust_remote_code: bool) -> tuple | None:
    """The cache key of a pair's folders (None: not cacheable)."""
    d, v = _fingerprint(drafter), _fingerprint(verifier)
    if d is None or v is None:
        return None
    return (
        str(Path(drafter).resolve()),
        d,
        str(Path(verifier).resolve()),
        v,
        trust_remote_code,
    )


def remember(k: tuple | None, vmap: VocabMap) -> None:
    if k is None:
        return
    with _lock:
        _maps[k] = vmap
        _maps.move_to_end(k)
        while len(_maps) > KEPT:
            _maps.popitem(last=False)


def recall(k: tuple | None) -> VocabMap | None:
    if k is None:
        return None
    with _lock:
        return _maps.get(k)
