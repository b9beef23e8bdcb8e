"""Which names are the embedded toy pair, and what it may not be used for (a captioner): the policy every
front end (the commands, the server, the demo, the captioners) reads, before any model loads."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError, ModelPairError
from .defaults import EMBEDDED, embedded_models


def is_embedded(name: str | None, role: str = "drafter") -> bool:
    """Whether `name` is the embedded toy pair's model for `role` (by the name `embedded` or by its folder)."""
    if name is None:
        return False
    if name == EMBEDDED:
        return True
    try:
        folder = embedded_models()[role]
    except ModelPairError:  # the pair is not installed: nothing can be it
        return False
    return folder is not None and Path(name).resolve() == Path(folder).resolve()


def check_captioning_model(name: str | None, flag: str, otherwise: str) -> None:
    """The embedded toy drafter is no captioner (it writes toy-world answers): refuse it by name, before any
    model loads. `flag` names the option, `otherwise` what the user can do instead."""
    if is_embedded(name):
        raise ConfigError(f"the embedded toy drafter cannot caption images (it only answers questions about its "
                          f"toy scenes): pass {flag} with a vision-language model (a hub id such as "
                          f"Qwen/Qwen3-VL-2B-Instruct, or a local folder), or {otherwise}")
