"""The float32 precision the doctor's exact rows run at: IEEE float32 in every engine process it starts.

vLLM's Triton attention calls `tl.dot` without an input precision (v1/attention/ops/triton_unified_attention.py,
S = tl.dot(Q, K), acc += tl.dot(P, V)), so on a GPU with TF32 tensor cores Triton rounds float32 Q, K, P, V to
TF32 (10-bit mantissa: logits off by ~5e-4 relative on the doctor's pair, 5-8x its 1e-4 tolerance) unless
TRITON_F32_DEFAULT says otherwise (triton/language/core.py `dot`: knobs.language.fp32_default first; the variable
is one of triton's cache-invalidating ones, so kernels compiled before are not reused). vLLM's workers set torch's
float32 matmul precision from VLLM_FLOAT32_MATMUL_PRECISION (v1/worker/gpu_worker.py Worker.__init__; "high" or
"medium" would let cuBLAS use TF32). The doctor pins both for its checks, in its own process (the transformers
reference) and, through the environment its engines' processes inherit, in vLLM's engine core and workers.
cuDNN's float32 convolutions (the drafter's patch embedding, a Conv3d, in the transformers reference) default to
TF32 on a GPU (torch.backends.cudnn.allow_tf32 is True by default): the doctor pins them to IEEE in its own process
with torch's new API (torch.backends.cudnn.conv.fp32_precision = "ieee"; setting the legacy allow_tf32 beside it
makes torch 2.10 refuse to read either). vLLM's workers are not pinned there: no setting of vLLM's reaches cuDNN.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

PINNED = {"TRITON_F32_DEFAULT": "ieee", "VLLM_FLOAT32_MATMUL_PRECISION": "highest"}
TORCH_PRECISION = "highest"  # torch.set_float32_matmul_precision in this process (the transformers reference)
CONV_PRECISION = "ieee"  # torch.backends.cudnn.conv.fp32_precision in this process (no TF32 convolutions)


def describe() -> str:
    """The pin as the report states it."""
    return (
        ", ".join(f"{k}={v}" for k, v in PINNED.items())
        + f"; cuDNN conv fp32_precision={CONV_PRECISION} (float32 rows: IEEE float32, no TF32)"
    )


@contextmanager
def exact_float32():
    """PINNED in os.environ (a user's own values replaced), torch's matmul precision at TORCH_PRECISION and cuDNN's
    float32 convolutions at CONV_PRECISION while the block runs; all restored after."""
    import torch  # lazy: loads torch

    saved_env = {k: os.environ.get(k) for k in PINNED}
    saved_torch = torch.get_float32_matmul_precision()
    conv = torch.backends.cudnn.conv
    saved_conv = conv.fp32_precision
    os.environ.update(PINNED)
    torch.set_float32_matmul_precision(TORCH_PRECISION)
    conv.fp32_precision = CONV_PRECISION
    try:
        yield
    finally:
        conv.fp32_precision = saved_conv
        torch.set_float32_matmul_precision(saved_torch)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
