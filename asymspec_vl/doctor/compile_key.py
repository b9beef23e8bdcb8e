"""vLLM's compile-cache keys of an asymspec engine (issue 44 item 1), as a row of `asymspec-vl doctor --quick`:
vLLM 0.19 loads compiled graphs from disk with their guards off, keyed by VllmConfig.compute_hash (which holds
SpeculativeConfig.compute_hash, extended by hooks/config_patch.py) and the AOT artifacts' factors; the keys of both
models must move with the installed asymspec-vl version and the drafter's traced-call layout
(vllm_patches/version.py DRAFTER_TRACE_LAYOUT), and differ from a stock draft_model engine's on the same pair.
No engine starts: the configs are built as vLLM builds them."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

from .cases import Check

NAME = "compile-cache key: version, layout, method"


def engine_configs(paths: dict, method: str = "asymspec"):
    """(the engine's VllmConfig, the drafter's) of a speculative engine on the pair at paths (vl_drafter, verifier),
    built as vLLM builds them (EngineArgs.create_engine_config; DraftModelProposer._create_draft_vllm_config),
    compiled (no engine starts)."""
    from vllm.engine.arg_utils import EngineArgs  # lazy: loads vLLM
    from vllm.v1.spec_decode.draft_model import DraftModelProposer  # lazy: loads vLLM

    import vllm_patches  # lazy: installs the hooks

    vllm_patches.apply()
    config = EngineArgs(
        model=str(paths["verifier"]),
        max_model_len=1024,
        enforce_eager=False,
        speculative_config={
            "method": method,
            "model": str(paths["vl_drafter"]),
            "num_speculative_tokens": 2,
        },
    ).create_engine_config()
    proposer = DraftModelProposer.__new__(DraftModelProposer)
    proposer.vllm_config = config
    proposer.speculative_config = config.speculative_config
    return config, proposer._create_draft_vllm_config()


def compile_keys(config) -> tuple[str, str]:
    """The factors of `config` in vLLM's two compile-cache keys: the AOT artifacts' (compilation/decorators.py:
    aot_compile_hash_factors, with the env's; the traced forward's name is the same for every engine here) and the
    piecewise cache's config hash (compilation/backends.py VllmBackend.__call__)."""
    from vllm.compilation.caching import aot_compile_hash_factors  # lazy: loads vLLM

    aot = hashlib.sha256(str(aot_compile_hash_factors(config)).encode()).hexdigest()
    return aot, config.compute_hash()


def keys_of(paths: dict, method: str = "asymspec") -> dict:
    """{"verifier": (aot, hash), "drafter": (aot, hash)} of a speculative engine on the pair."""
    verifier, drafter = engine_configs(paths, method)
    return {"verifier": compile_keys(verifier), "drafter": compile_keys(drafter)}


@contextmanager
def factors(version: str | None = None, layout: int | None = None):
    """hooks/config_patch.py's asymspec-vl version and drafter layout replaced while the block runs."""
    from vllm_patches.hooks import config_patch  # lazy: loads torch

    saved = config_patch.asymspec_vl_version, config_patch.DRAFTER_TRACE_LAYOUT
    if version is not None:
        config_patch.asymspec_vl_version = lambda: version
    if layout is not None:
        config_patch.DRAFTER_TRACE_LAYOUT = layout
    try:
        yield
    finally:
        config_patch.asymspec_vl_version, config_patch.DRAFTER_TRACE_LAYOUT = saved


def compile_key_check(paths: dict) -> Check:
    """Two asymspec-vl versions, two layout versions and a stock draft_model engine: five distinct keys of each
    model (AOT and piecewise), and the method among the key's factors."""
    from vllm_patches.hooks import config_patch  # lazy: loads torch
    from vllm_patches.version import DRAFTER_TRACE_LAYOUT  # lazy: loads torch

    keys = {}
    with factors(version="1.0"):
        keys["version 1.0"] = keys_of(paths)
        stable = keys_of(paths) == keys["version 1.0"]
    with factors(version="2.0"):
        keys["version 2.0"] = keys_of(paths)
    with factors(version="1.0", layout=DRAFTER_TRACE_LAYOUT + 1):
        keys["layout + 1"] = keys_of(paths)
    with factors(version="1.0"):
        keys["draft_model"] = keys_of(paths, "draft_model")
    distinct = {
        (model, i): len({k[model][i] for k in keys.values()})
        for model in ("verifier", "drafter")
        for i in (0, 1)
    }
    holds_method = config_patch.compile_key_factors()[0] == config_patch.METHOD
    detail = (
        f"{min(distinct.values())}/{len(keys)} distinct keys of each model over {', '.join(keys)} "
        f"(AOT and piecewise); stable {stable}; factors {config_patch.compile_key_factors()}"
    )
    ok = stable and holds_method and min(distinct.values()) == len(keys)
    return Check.of(NAME, "-", ok, detail)
