"""Run by tests/doctor/test_doctor.py in a process of its own: the doctor's verdict on each of its attention runs on a
stand-in CUDA machine (compute capability 9.0, the flash-attn build's own version test answered "supported"),
and the head sizes, dtypes and block sizes each backend class declares, as JSON on stdout.

FlashInfer's backend module imports the flashinfer package at its top; this CPU machine has none, so stand-in
modules carrying the names it imports are installed first (vLLM then believes flashinfer is present for the
rest of the process: hence a process of its own). Every figure printed comes from vLLM's own classes."""

import importlib.machinery
import json
import sys
import types

FLASHINFER_NAMES = {
    "flashinfer": [
        "BatchDecodeWithPagedKVCacheWrapper",
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchPrefillWithRaggedKVCacheWrapper",
        "MultiLevelCascadeAttentionWrapper",
    ],
    "flashinfer.decode": ["fast_decode_plan", "trtllm_batch_decode_with_kv_cache"],
    "flashinfer.prefill": ["trtllm_batch_context_with_kv_cache"],
    "flashinfer.utils": ["FP4Tensor"],
}


class StandInCuda:
    device_name = "stand-in H100"

    def is_cuda(self) -> bool:
        return True

    def get_device_capability(self):
        from vllm.platforms.interface import DeviceCapability

        return DeviceCapability(9, 0)

    def device_count(self) -> int:
        return 1


def install_flashinfer_stand_in() -> None:
    for name, attrs in FLASHINFER_NAMES.items():
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        for attr in attrs:
            setattr(module, attr, type(attr, (), {}))
        sys.modules[name] = module


def main() -> None:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from asymspec_vl.doctor import backends as db

    install_flashinfer_stand_in()
    db.flash_attn_unsupported = lambda version: (
        None
    )  # no flash-attn build on a CPU machine
    heads = db.head_sizes(db.DRAFTER_SIZES, db.VERIFIER_SIZES)
    platform = StandInCuda()
    report = {"runs": {}, "backends": {}, "old_pair": {}}
    for run in db.RUNS:
        report["runs"][run.label] = db.verdict(run, heads, platform).__dict__
        report["old_pair"][run.label] = db.verdict(
            run, [32], platform
        ).__dict__  # the doctor's pair before
        cls = AttentionBackendEnum[run.backend].get_class()
        with set_current_vllm_config(VllmConfig()):
            block_size_taken = cls.supports_block_size(run.block_size)
        report["backends"][run.label] = {
            "head_sizes_taken": [
                h for h in (16, 32, 64, 80, 128, 256) if cls.supports_head_size(h)
            ],
            "declared_head_sizes": cls.get_supported_head_sizes(),
            "dtype_taken": cls.supports_dtype(getattr(torch, run.dtype)),
            "block_size_taken": block_size_taken,
            "pair_head_sizes_taken": all(cls.supports_head_size(h) for h in heads),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
