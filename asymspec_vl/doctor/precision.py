"""The doctor's exact rows compute in IEEE float32 on every backend: pins set before any engine starts.

vLLM's Triton attention (v1/attention/ops/triton_unified_attention.py) calls `tl.dot` without an input precision,
and Triton 3.x then takes TF32 for float32 operands on NVIDIA GPUs from Ampere on (10 mantissa bits): emulating
TF32 rounding of Q, K, P and V on the doctor's tiny pair moved logits 4.75e-4 to 8.52e-4 relative, 5-8x the
exact rows' 1e-4 (issue 32, finding 3). TRITON_F32_DEFAULT=ieee makes Triton's float32 dots IEEE float32 (read
in triton/knobs.py when a kernel compiles); VLLM_FLOAT32_MATMUL_PRECISION=highest keeps vLLM's float32 matmuls
(torch.set_float32_matmul_precision) at full precision. Engine processes inherit both. A user's run at TF32 is
held by the bfloat16 rows' tolerance, not by these.
"""

from __future__ import annotations

import os

EXACT_FLOAT32_ENV = {"TRITON_F32_DEFAULT": "ieee", "VLLM_FLOAT32_MATMUL_PRECISION": "highest"}


def pin_exact_float32(environ=os.environ) -> str:
    """Set EXACT_FLOAT32_ENV in `environ` (over any other value: the exact rows need it); the report's line."""
    environ.update(EXACT_FLOAT32_ENV)
    return ", ".join(f"{k}={v}" for k, v in EXACT_FLOAT32_ENV.items())
