"""Where a model name points, checked before anything loads: a local folder holding config.json, or a hub id that
is cached or can be downloaded now. Every other case is one ModelPairError line that names the path or id, the
offline `embedded` pair and HF_HUB_OFFLINE, instead of transformers' traceback or a minute of silent retries.

Offline is HF_HUB_OFFLINE set, or the hub not answering a short HTTP request (PROBE_TIMEOUT_S); a cached hub
id then loads from its local snapshot folder, so no later call waits on the network."""

from __future__ import annotations

import enum
import os
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from ..core.errors import ModelPairError

EMBEDDED = (
    "embedded"  # the offline toy pair's name (defaults.py resolves it to its paths)
)
EMBEDDED_LLAMA = "embedded-llama"  # the toy drafter with the toy Llama verifier (its own vocabulary: cross-family)
EMBEDDED_NAMES = (EMBEDDED, EMBEDDED_LLAMA)

PROBE_TIMEOUT_S = 3.0
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
OFFLINE_HINT = "`embedded` names the offline toy pair"


class Weights(enum.Enum):
    """Whether a model folder must hold weights: REQUIRED for every load but one; RANDOM only where the loader
    makes them up (the vLLM backend with load_format="dummy": the doctor's and bench_vllm's sized shapes)."""

    REQUIRED = "required"
    RANDOM = "random"

    @classmethod
    def for_backend(cls, backend: str, engine_kwargs: dict) -> Weights:
        return (
            cls.RANDOM
            if backend == "vllm" and engine_kwargs.get("load_format") == "dummy"
            else cls.REQUIRED
        )


def pair_names(
    drafter: str | None,
    verifier: str | None,
    default_drafter: str,
    default_verifier: str,
) -> tuple[str, str]:
    """The drafter and verifier names to load: `embedded` on one side means `embedded` on the other unless both
    are given (a verifier `embedded-llama` alone means the embedded drafter); a side left None takes its default."""
    if drafter is None and verifier in EMBEDDED_NAMES:
        drafter = EMBEDDED
    if verifier is None and drafter == EMBEDDED:
        verifier = EMBEDDED
    return drafter or default_drafter, verifier or default_verifier


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (1, ON, YES, TRUE), from the environment at call time."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in (
        "1",
        "ON",
        "YES",
        "TRUE",
    )


def hub_reachable(
    endpoint: str | None = None, timeout_s: float = PROBE_TIMEOUT_S
) -> bool:
    """Whether the hub answers an HTTP request (any status) within timeout_s in all: a host that accepts the
    connection but never answers is unreachable too. The request runs in a thread, since name lookup ignores
    socket timeouts and urllib's timeout is per socket operation."""

    from huggingface_hub import constants  # lazy: loads huggingface_hub

    url = (endpoint or constants.ENDPOINT).rstrip("/") + "/api/models?limit=1"
    answered = []

    def probe() -> None:
        try:
            urllib.request.urlopen(
                urllib.request.Request(url, method="HEAD"), timeout=timeout_s
            ).close()
            answered.append(True)
        except urllib.error.HTTPError:  # a status line came back: the hub answers
            answered.append(True)
        except (
            OSError,
            ValueError,
        ):  # refused, timed out, no such host, a malformed endpoint
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s)
    return bool(answered)


def looks_like_path(name: str) -> bool:
    """A name that can only be a path: absolute, ./ ../ ~, a backslash, or more than one '/' (hub ids are
    `name` or `org/name`)."""
    return (
        name.startswith(("/", ".", "~"))
        or "\\" in name
        or name.count("/") > 1
        or name.endswith("/")
    )


def locate(role: str, name: str, weights: Weights = Weights.REQUIRED) -> str:
    """`name` as the loaders should read it: a local folder (checked; its weights only when `weights` is
    REQUIRED), a hub id (cached, or the hub is reachable), or a cached hub id's snapshot folder when the hub is
    unreachable. Raises ModelPairError."""
    if not isinstance(name, str) or not name.strip():
        raise ModelPairError(
            f"{role}={name!r} is not a model name: pass a local folder, a hub id, or "
            f"{EMBEDDED!r} (the offline toy pair)"
        )
    path = Path(name).expanduser()
    if path.exists():
        return _checked_folder(role, name, path, weights)
    if looks_like_path(name):
        raise ModelPairError(
            f"{role} {name!r}: no such folder ({OFFLINE_HINT}; hub ids look like org/name and "
            "load offline from the cache with HF_HUB_OFFLINE=1)"
        )
    return _hub_id(role, name)


def _checked_folder(role: str, name: str, path: Path, weights: Weights) -> str:
    if not path.is_dir():
        raise ModelPairError(
            f"{role} {name!r} is a file, not a model folder (a folder holding config.json, the "
            f"weights and the tokenizer; {OFFLINE_HINT}; HF_HUB_OFFLINE=1 for cached hub ids)"
        )
    if not (path / "config.json").is_file():
        raise ModelPairError(
            f"{role} {name!r} has no config.json, so it is not a model folder ({OFFLINE_HINT}; "
            "HF_HUB_OFFLINE=1 loads cached hub ids)"
        )
    for what, patterns in (("weights", WEIGHT_FILES), ("tokenizer", TOKENIZER_FILES)):
        if what == "weights" and weights is Weights.RANDOM:
            continue
        if not any(next(path.glob(pattern), None) for pattern in patterns):
            raise ModelPairError(
                f"{role} {name!r} has no {what} ({', '.join(patterns)}): copy the whole model "
                f"folder ({OFFLINE_HINT}; HF_HUB_OFFLINE=1 loads cached hub ids)"
            )
    return name


def _hub_id(role: str, name: str) -> str:
    from huggingface_hub import try_to_load_from_cache  # lazy: loads huggingface_hub

    cached = try_to_load_from_cache(name, "config.json")
    cached = cached if isinstance(cached, str) else None
    if hub_offline():
        if cached is None:
            raise ModelPairError(
                f"{role} {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
                f"forbids downloading it: download it once online, pass a local folder, or use "
                f"{EMBEDDED!r} (the offline toy pair)"
            )
        return name
    if hub_reachable():
        return name
    if cached is None:
        raise ModelPairError(
            f"{role} {name!r} is not in the local Hugging Face cache and the hub is unreachable "
            f"(no answer within {PROBE_TIMEOUT_S:g} s): connect, pass a local folder, or use "
            f"{EMBEDDED!r} (the offline toy pair); set HF_HUB_OFFLINE=1 to skip this check"
        )
    print(
        f"note: the Hugging Face hub is unreachable; {role} {name} loads from the local cache (set "
        "HF_HUB_OFFLINE=1 to skip the check)",
        file=sys.stderr,
    )
    return str(Path(cached).parent)
