"""The gate kernel's checks from the command line (the doctor runs the self-check in a process of its own, where
triton's interpreter can be switched on before triton is imported):

    python -m asymspec_vl.doctor.kernels self-check [--vocab 151936] [--dtype bfloat16] [--reference float64] [--json]
    python -m asymspec_vl.doctor.kernels compile [--arch 90]

self-check: the Triton kernel against the torch reference on this machine's device (core/kernels/self_check.py);
compile: every kernel variant compiled for a CUDA target, no GPU needed (core/kernels/compile_check.py).
"""

from __future__ import annotations

import argparse
import json

from ..core.kernels.compile_check import compile_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="check", required=True)
    p = sub.add_parser(
        "self-check",
        help="the kernel against the torch reference on this machine's device",
    )
    p.add_argument(
        "--vocab", type=int, default=151_936, help="V (Qwen3's 151,936 by default)"
    )
    p.add_argument(
        "--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32")
    )
    p.add_argument(
        "--reference",
        default=None,
        choices=("float64", "float32"),
        help="the torch reference's dtype (default: the kernel's)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the result as one JSON line"
    )
    p = sub.add_parser(
        "compile",
        help="compile every kernel variant for a CUDA target (run without TRITON_INTERPRET)",
    )
    p.add_argument(
        "--arch",
        type=int,
        default=90,
        help="CUDA compute capability x10 (90: H100 / H200)",
    )
    args = ap.parse_args(argv)
    if args.check == "compile":
        print(f"compiled {compile_all(args.arch)} kernel variants for sm_{args.arch}")
        return 0
    from ..core.kernels.self_check import self_check  # lazy: loads torch

    result = self_check(dtype=args.dtype, vocab=args.vocab, reference=args.reference)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['cases'] - len(result['mismatches'])}/{result['cases']} cases equal on {result['device']} "
            f"({args.dtype}, V={args.vocab}, reference {result['reference']})"
            + "".join(f"\n  differs: {m}" for m in result["mismatches"])
        )
    return 1 if result["mismatches"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
