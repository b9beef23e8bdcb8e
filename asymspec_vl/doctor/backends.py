"""Which attention backends `asymspec-vl doctor` runs, with which tiny pair, and whether each can run here.

A run is decided by the calls vLLM's own selector makes (platforms/cuda.py `get_attn_backend_cls`): the
backend class from AttentionBackendEnum (an ImportError is a missing package), its compute-capability test, the
flash-attn build's version test (vllm_flash_attn `fa_version_unsupported_reason`), then the class's
`validate_configuration` for the pair's head sizes, the run's dtype and block size. What the machine lacks (a
CUDA GPU, a package, a compute capability, an FA version) makes the run "skipped" with vLLM's reason; a pair or
run the backend refuses (head size, dtype, block size) is the doctor's own fault and "failed".
"""

from __future__ import annotations

from dataclasses import dataclass

from ..toy.tiny import TinySizes

# The doctor's pair. head_dim 64 is one every backend it runs takes (FlashInfer 64/128/256, FA multiples of 8 up
# to 256, Triton >= 32, CPU 32/64/...); the verifier has twice the drafter's query heads (as Qwen3-32B's 64 against
# Qwen3-VL-2B's 16), so attention planned with the wrong model's heads shows; one KV head each (8 and 8 there):
# both models' layers share one KV cache group.
DRAFTER_SIZES = TinySizes(heads=2, kv_heads=1, head_dim=64)
VERIFIER_SIZES = TinySizes(heads=4, kv_heads=1, head_dim=64)


@dataclass(frozen=True)
class AttentionRun:
    """One attention backend configuration the doctor's checks run on."""

    label: str
    backend: str  # vLLM's AttentionBackendEnum name
    dtype: str  # float32: exact agreement with transformers required
    block_size: int = 16
    flash_attn_version: int | None = None

    @property
    def exact(self) -> bool:
        return self.dtype == "float32"

    @property
    def on_gpu(self) -> bool:
        return self.backend != "CPU_ATTN"

    def engine_kwargs(self) -> dict:
        kwargs = {"block_size": self.block_size}
        if self.on_gpu:
            attention = {"backend": self.backend}
            if self.flash_attn_version is not None:
                attention["flash_attn_version"] = self.flash_attn_version
            kwargs["attention_config"] = attention
        return kwargs


RUNS = (
    AttentionRun("CPU_ATTN", "CPU_ATTN", "float32"),
    AttentionRun("TRITON_ATTN", "TRITON_ATTN", "float32"),
    AttentionRun("FLASH_ATTN (FA3)", "FLASH_ATTN", "bfloat16", flash_attn_version=3),
    AttentionRun("FLASH_ATTN (FA2)", "FLASH_ATTN", "bfloat16", flash_attn_version=2),
    AttentionRun("FLASHINFER", "FLASHINFER", "bfloat16"),
    AttentionRun(
        "FLASHINFER, block size 128", "FLASHINFER", "bfloat16", block_size=128
    ),  # kernel pages of 64
)


@dataclass(frozen=True)
class Verdict:
    result: str  # "run", "skipped" (the machine cannot) or "failed" (the doctor's configuration is invalid)
    reason: str = ""


def head_sizes(*sizes: TinySizes) -> list[int]:
    return sorted({s.head_dim for s in sizes})


def verdict(run: AttentionRun, heads: list[int], platform) -> Verdict:
    """Can `run` start on `platform` (vLLM's current_platform, or a stand-in) with a pair of these head sizes?"""
    import torch  # lazy: loads torch
    from vllm.config import VllmConfig, set_current_vllm_config  # lazy: loads vLLM
    from vllm.v1.attention.backend import AttentionType  # lazy: loads vLLM
    from vllm.v1.attention.backends.registry import (
        AttentionBackendEnum,
    )  # lazy: loads vLLM

    if run.on_gpu != bool(platform.is_cuda()):
        return Verdict(
            "skipped",
            f"needs {'a CUDA GPU' if run.on_gpu else 'the CPU build'} "
            f"(vLLM platform here: {platform.device_name})",
        )
    try:
        backend = AttentionBackendEnum[run.backend].get_class()
    except ImportError as e:
        return Verdict("skipped", f"{run.backend} cannot be imported here: {e}")
    capability = platform.get_device_capability()
    if capability is not None and not backend.supports_compute_capability(capability):
        return Verdict(
            "skipped",
            f"{run.backend} does not run on compute capability "
            f"{capability.major}.{capability.minor}",
        )
    if run.flash_attn_version is not None:
        reason = flash_attn_unsupported(run.flash_attn_version)
        if reason:
            return Verdict("skipped", reason)
    dtype = getattr(torch, run.dtype)
    with set_current_vllm_config(
        VllmConfig()
    ):  # some classes read it (FA's block sizes: hybrid models' only)
        problems = sorted(
            {
                reason
                for head_size in heads
                for reason in backend.validate_configuration(
                    head_size=head_size,
                    dtype=dtype,
                    kv_cache_dtype="auto",
                    block_size=run.block_size,
                    use_mla=False,
                    has_sink=False,
                    use_sparse=False,
                    use_mm_prefix=False,
                    use_per_head_quant_scales=False,
                    device_capability=capability,
                    attn_type=AttentionType.DECODER,
                )
            }
        )
    if problems:
        return Verdict(
            "failed",
            f"the doctor's tiny pair (head sizes {heads}, {run.dtype}, block size "
            f"{run.block_size}) is invalid for {run.backend}: {', '.join(problems)}",
        )
    return Verdict("run")


def flash_attn_unsupported(version: int) -> str | None:
    """vLLM's flash-attn build's reason why FA `version` cannot run here, or None."""
    try:
        # lazy: optional: the except branch handles its absence
        from vllm.vllm_flash_attn.flash_attn_interface import (
            fa_version_unsupported_reason,
        )
    except ImportError as e:
        return f"vllm_flash_attn cannot be imported here: {e}"
    return fa_version_unsupported_reason(version)


def tensor_parallel_verdict(platform) -> Verdict:
    """TP=2 needs two CUDA GPUs (the CPU build's TP runs in the test suite, not here)."""
    if not platform.is_cuda():
        return Verdict(
            "skipped",
            f"needs two CUDA GPUs (vLLM platform here: {platform.device_name})",
        )
    count = platform.device_count()
    if count < 2:
        return Verdict("skipped", f"needs two CUDA GPUs; this machine has {count}")
    return Verdict("run")
