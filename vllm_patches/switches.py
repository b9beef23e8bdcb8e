"""On/off switches for the cross-modal patches, so tests can show what each one is needed for.

Both default to on. Off, they reproduce the two failure modes of the paper's Appendix E:
  mm_embeds     patch (4): the merged image embeddings (with DeepStack features) reach the drafter's
                x_full prefill through propose(..., mm_embed_inputs=...). Off: the drafter embeds the
                image_pad tokens as text and never sees the image.
  no_length_gate patch (5): the drafter reads x_full whatever its length. Off: the original engine's
                aug-substitution gate, which used x_full only when |x_full| > |x_comp|, and otherwise let
                the drafter read x_comp (with images x_full is often the shorter prompt).
Set ASYMSPEC_VLLM_DISABLE="mm_embeds,no_length_gate" (read in every process at import), or use
`disabled(...)` inside one in-process engine.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

PATCH_SWITCHES = ("mm_embeds", "no_length_gate")
_ENV = "ASYMSPEC_VLLM_DISABLE"


def _from_env() -> set[str]:
    names = {n.strip() for n in os.environ.get(_ENV, "").split(",") if n.strip()}
    unknown = names - set(PATCH_SWITCHES)
    if unknown:
        raise ValueError(
            f"{_ENV} names unknown patches {sorted(unknown)}; known: {PATCH_SWITCHES}"
        )
    return names


_disabled: set[str] = _from_env()


def enabled(name: str) -> bool:
    if name not in PATCH_SWITCHES:
        raise KeyError(f"unknown patch switch {name!r}; known: {PATCH_SWITCHES}")
    return name not in _disabled


@contextmanager
def disabled(*names: str):
    """Turn patches off for the duration (engine running in this process)."""
    for n in names:
        enabled(n)  # validates the name
    before = set(_disabled)
    _disabled.update(names)
    try:
        yield
    finally:
        _disabled.clear()
        _disabled.update(before)
