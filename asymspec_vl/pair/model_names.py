"""Which names are the embedded toy pair, and what it may not be used for (a captioner): the policy every
front end (the commands, the server, the demo, the captioners) reads, before any model loads."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError, ModelPairError
from .defaults import EMBEDDED_NAMES, embedded_models


def is_embedded(name: str | None, role: str = "drafter") -> bool:
    """Whether `name` is an embedded toy pair's model for `role` (by the name `embedded` / `embedded-llama` or by
    its folder)."""
    if name is None:
        return False
    if name in EMBEDDED_NAMES:
        return True
    try:
        folders = [embedded_models(pair)[role] for pair in EMBEDDED_NAMES]
    except ModelPairError:  # the pairs are not installed: nothing can be them
        return False
    return any(
        f is not None and Path(name).resolve() == Path(f).resolve() for f in folders
    )


def check_captioning_model(name: str | None, flag: str, otherwise: str) -> None:
    """The embedded toy drafter is no captioner (it writes toy-world answers): refuse it by name, before any
    model loads. `flag` names the option, `otherwise` what the user can do instead."""
    if is_embedded(name):
        raise ConfigError(
            f"the embedded toy drafter cannot caption images (it only answers questions about its "
            f"toy scenes): pass {flag} with a vision-language model (a hub id such as "
            f"Qwen/Qwen3-VL-2B-Instruct, or a local folder), or {otherwise}"
        )
