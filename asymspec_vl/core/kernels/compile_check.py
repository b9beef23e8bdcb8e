"""Compile every gate-kernel variant for a CUDA target (Triton -> PTX -> cubin with the bundled ptxas), no GPU
needed: catches what triton's interpreter accepts but the compiler does not. Run without TRITON_INTERPRET:

    python -m asymspec_vl.doctor.kernels compile [--arch 90]
"""

from __future__ import annotations

import os

PTR = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}
ROW = {"V": "i32", "P": "i32", "sa0": "i64", "sa1": "i32", "sb0": "i64", "sb1": "i32"}


def variants():
    """(kernel name, signature, constexprs) covering every dtype, gate, delta source, bonus rule and layout."""
    from .triton_gate import DELTA_IDS, GATE_IDS  # lazy: loads torch, triton

    for dtype, delta, beta_zero, banned, t_argmax in (
        [(d, 0, False, True, True) for d in PTR]
        + [("bfloat16", x, False, True, False) for x in (1, 2)]
        + [("bfloat16", 0, True, False, True)]
    ):
        p = PTR[dtype]
        sig = {
            "a_ptr": p,
            "b_ptr": p,
            "t_ptr": p,
            "banned_ptr": "*i1",
            "fpart_ptr": "*fp32",
            "ipart_ptr": "*i32",
            **ROW,
            "st0": "i64",
            "st1": "i32",
            "beta": "fp32",
            "chunk": "i32",
            "NC": "i32",
        }
        yield (
            "_stats_kernel",
            sig,
            {
                "BLOCK": 2048,
                "DELTA": delta,
                "BETA_ZERO": beta_zero,
                "HAS_BANNED": banned,
                "T_ARGMAX": t_argmax,
            },
        )
    for dtype, kl in [(d, False) for d in PTR] + [("bfloat16", True)]:
        sig = {
            "a_ptr": PTR[dtype],
            "b_ptr": PTR[dtype],
            "fpart_ptr": "*fp32",
            "dpart_ptr": "*fp32",
            **ROW,
            "chunk": "i32",
            "NC": "i32",
        }
        yield "_divergence_kernel", sig, {"BLOCK": 2048, "NC_P2": 64, "KL": kl}
    for has_n, gate, bonus_fused, has_div in [
        (True, g, False, True) for g in GATE_IDS.values()
    ] + [(False, 0, True, False)]:
        p = PTR["bfloat16"]
        sig = {
            "a_ptr": p,
            "b_ptr": p,
            "t_ptr": p,
            "drafts_ptr": "*i64",
            "n_ptr": "*i32",
            "fpart_ptr": "*fp32",
            "ipart_ptr": "*i32",
            "dpart_ptr": "*fp32",
            "out_ptr": "*i32",
            "n_acc_ptr": "*i32",
            "token_ptr": "*i32",
            "div_ptr": "*fp32",
            **ROW,
            "st0": "i64",
            "st1": "i32",
            "K": "i32",
            "out_stride": "i32",
            "log_gamma": "fp32",
            "lam": "fp32",
            "NC": "i32",
        }
        yield (
            "_decide_kernel",
            sig,
            {
                "S_P2": 16,
                "NC_P2": 64,
                "HAS_N": has_n,
                "GATE": gate,
                "BONUS_FUSED": bonus_fused,
                "HAS_DIV": has_div,
            },
        )
    assert len(DELTA_IDS) == 3  # the stats variants above cover delta ids 0, 1, 2


def compile_all(arch: int = 90, num_warps: int = 8) -> int:
    """Compile every variant to a cubin; returns how many were compiled (raises on the first failure)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(
            "unset TRITON_INTERPRET: the interpreter replaces the kernels the compiler needs"
        )
    import triton  # lazy: loads triton
    from triton.backends.compiler import GPUTarget  # lazy: loads triton
    from triton.compiler import ASTSource  # lazy: loads triton

    from . import triton_gate  # lazy: loads torch, triton

    target, n = GPUTarget("cuda", arch, 32), 0
    for name, sig, constexprs in variants():
        src = ASTSource(
            fn=getattr(triton_gate, name),
            signature={**sig, **{k: "constexpr" for k in constexprs}},
            constexprs=constexprs,
        )
        kernel = triton.compile(
            src,
            target=target,
            options={"num_warps": num_warps, "enable_fp_fusion": False},
        )
        assert kernel.asm.get("cubin"), f"{name}: no cubin"
        n += 1
    return n
