"""Run-time patches that add speculative method "asymspec" to vLLM 0.19 (the paper's Appendix E).

Loaded in every vLLM process through the `vllm.general_plugins` entry point (`register`), so `LLM(...)`
with or without multiprocessing and `vllm serve` all get them; `apply()` installs them explicitly.
Nothing in site-packages is modified: vLLM classes are wrapped attribute by attribute, each wrapper
delegating to the original for every configuration but method "asymspec", and applying twice is a no-op.
Use:
    LLM(model=verifier, speculative_config={"method": "asymspec", "model": drafter,
                                            "num_speculative_tokens": K}, ...)
with per-request inputs in SamplingParams(extra_args=request_args.make_extra_args(...)).
"""

from __future__ import annotations

import logging

from .config_patch import METHOD
from .request_args import make_extra_args
from .switches import PATCH_SWITCHES, disabled
from .version import SUPPORTED_VLLM_VERSIONS, UnsupportedVLLMVersionError, check_vllm_version

__all__ = ["METHOD", "SUPPORTED_VLLM_VERSIONS", "UnsupportedVLLMVersionError", "apply", "register",
           "make_extra_args", "disabled", "PATCH_SWITCHES", "is_applied"]

logger = logging.getLogger(__name__)
_applied = False


def apply() -> None:
    """Install the patches; raises UnsupportedVLLMVersionError on a vLLM other than 0.19.0 / 0.19.1."""
    global _applied
    check_vllm_version()
    if _applied:
        return
    from .config_patch import patch_speculative_config
    from .cpu_patch import patch_cpu_runner
    from .runner_patch import patch_model_runner
    from .scheduler_patch import patch_scheduler

    patch_speculative_config()
    patch_model_runner()
    patch_scheduler()
    if _cpu_build():
        patch_cpu_runner()
    _applied = True


def is_applied() -> bool:
    return _applied


def register() -> None:
    """vLLM general-plugin entry point: called once in every vLLM process. On an unsupported vLLM it
    installs nothing (so other uses of vLLM keep working) and warns; asking for method "asymspec" then
    fails in vLLM's own config validation, and `apply()` raises with the supported versions."""
    try:
        apply()
    except UnsupportedVLLMVersionError as e:
        logger.warning("%s The asymspec speculative method is not available.", e)


def _cpu_build() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()
