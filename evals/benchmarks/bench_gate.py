"""Benchmark: the gate/fusion step (fused Triton kernel, torch path) against a plain copy of the same bytes.

    python -m asymspec_vl.evals.benchmarks.bench_gate [--shapes 1x2,1x4,8x4,64x8] [--dtype bfloat16]
                                                      [--gate cda] [--repeat 20] [--out DIR]

For logits a, b, t [B, K+1, V] (V = 151,936, Qwen3's vocabulary) it prints per call: the logical bytes
(a, b, t read once: the physical floor of any implementation), the bytes the kernel moves (a, b, t once for
the statistics pass, a and b again for the divergence pass), the time, the achieved bandwidth and its share
of the bandwidth of a plain device copy, and the share of a decode step of the paper's pair (Qwen3-VL-2B
drafter + Qwen3-32B verifier) estimated from their weight bytes at the measured copy bandwidth (a lower
bound of the step, so an upper bound of the share). Without a GPU the kernel runs in triton's interpreter,
only at small sizes (--interpret-max-rows): those times are not performance figures.
"""

from __future__ import annotations

import os
import shutil

if shutil.which("nvidia-smi") is None:  # must precede the first import of triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from asymspec_vl.evals.report import markdown_table, write_table  # noqa: E402

from asymspec_vl.core import gate  # noqa: E402
from asymspec_vl.core.config import GATES, AsymSpecConfig  # noqa: E402

V_QWEN = 151_936
VERIFIER_PARAMS = 32.8e9  # Qwen3-32B (model card)
DRAFTER_TEXT_PARAMS = (
    1.7e9  # Qwen3-VL-2B's language model; the vision tower runs once per request
)
COLUMNS = [
    "path",
    "B",
    "K",
    "dtype",
    "logical MB",
    "moved MB",
    "time ms",
    "GB/s",
    "% copy BW",
    "x floor",
    "% decode step",
]


def timed(fn, device: torch.device, repeat: int, warmup: int = 2) -> float:
    """Median seconds of fn() over `repeat` calls (CUDA: synchronised around each call)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(nbytes: int, device: torch.device, repeat: int) -> float:
    """Bytes per second (read + write) of dst.copy_(src) for an nbytes buffer."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), device, repeat)


def step_floor_s(K: int, dtype: torch.dtype, bandwidth: float) -> float:
    """Decode-step lower bound of the paper's pair: the verifier's weights read once, the drafter's K + 2
    times (K drafts on x_full, a_{K+1} or the x_comp pass, the x_comp pass), at `bandwidth` bytes/s."""
    elt = torch.finfo(dtype).bits // 8
    return (VERIFIER_PARAMS + (K + 2) * DRAFTER_TEXT_PARAMS) * elt / bandwidth


def make_inputs(
    B: int, K: int, V: int, dtype: torch.dtype, device: torch.device, seed: int = 0
):
    g = torch.Generator(device=device).manual_seed(seed)
    a, b, t = (
        torch.randn(B, K + 1, V, generator=g, device=device).to(dtype) for _ in range(3)
    )
    drafts = torch.randint(0, V, (B, K), generator=g, device=device)
    banned = torch.zeros(V, dtype=torch.bool, device=device)
    banned[-300:] = (
        True  # lm_head padding rows and structural tokens, as ModelPair.banned_mask
    )
    return a, b, t, drafts, banned


def bench_shape(B, K, args, device, copy_bw) -> list[dict]:
    # lazy: loads triton
    from asymspec_vl.core.kernels.triton_gate import (
        run_gate,
    )  # after TRITON_INTERPRET is settled

    dtype = getattr(torch, args.dtype)
    cfg = AsymSpecConfig(K=K, gate=args.gate)
    a, b, t, drafts, banned = make_inputs(B, K, args.vocab, dtype, device)
    elt, rows = a.element_size(), B * (K + 1)
    logical = 3 * rows * args.vocab * elt
    two_pass = cfg.gate in ("cda", "kl")
    paths = {
        "torch": (lambda: gate.asymspec_step(a, b, t, drafts, cfg, banned), logical)
    }
    if device.type == "cuda" or rows <= args.interpret_max_rows:
        name = "triton" if device.type == "cuda" else "triton (interpreter)"
        moved = (5 if two_pass else 3) * rows * args.vocab * elt
        paths[name] = (
            lambda: run_gate(a, b, t, drafts, None, cfg, banned, with_divergence=False),
            moved,
        )
    out = []
    for name, (fn, moved) in paths.items():
        s = timed(fn, device, args.repeat if "interpreter" not in name else 1, warmup=1)
        bw = moved / s
        out.append(
            {
                "path": name,
                "B": B,
                "K": K,
                "dtype": args.dtype,
                "logical MB": logical / 1e6,
                "moved MB": moved / 1e6,
                "time ms": s * 1e3,
                "GB/s": bw / 1e9,
                "% copy BW": 100 * bw / copy_bw,
                "x floor": s / (logical / copy_bw),
                "% decode step": 100 * s / step_floor_s(K, dtype, copy_bw),
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--shapes",
        help="BxK list (default: 1x2,1x4,8x4,64x8 on CUDA; 1x2,1x4,8x4 on CPU)",
    )
    ap.add_argument(
        "--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"]
    )
    ap.add_argument("--vocab", type=int, default=V_QWEN)
    ap.add_argument("--gate", default="cda", choices=GATES)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument(
        "--interpret-max-rows",
        type=int,
        default=5,
        help="on CPU, run the interpreted kernel only when B*(K+1) is at most this",
    )
    ap.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's choice)"
    )
    ap.add_argument("--out", help="also write bench_gate.md/.csv/.json here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = args.shapes or (
        "1x2,1x4,8x4,64x8" if device.type == "cuda" else "1x2,1x4,8x4"
    )
    pairs = [tuple(int(x) for x in s.lower().split("x")) for s in shapes.split(",")]
    largest = max(
        3 * B * (K + 1) * args.vocab * torch.finfo(getattr(torch, args.dtype)).bits // 8
        for B, K in pairs
    )
    copy_bw = copy_bandwidth(largest, device, args.repeat)
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({os.cpu_count()} cores)"
    )
    name += f", {torch.get_num_threads()} torch threads" if device.type == "cpu" else ""
    print(
        f"device: {name}; copy bandwidth (read + write) {copy_bw / 1e9:.1f} GB/s over {largest / 1e6:.0f} MB; "
        f"gate={args.gate}, V={args.vocab}"
    )
    rows = [r for B, K in pairs for r in bench_shape(B, K, args, device, copy_bw)]
    print(markdown_table(rows, COLUMNS))
    print(
        "moved MB: bytes read by that path's design (torch: counted as the floor; its temporaries are "
        "extra); x floor: time / (logical bytes at copy bandwidth); % decode step: against the weight-"
        "read floor of Qwen3-32B + (K+2) Qwen3-VL-2B text passes at the copy bandwidth."
    )
    if args.out:
        write_table(
            rows,
            COLUMNS,
            args.out,
            "bench_gate",
            "Gate/fusion step against a plain copy",
        )


if __name__ == "__main__":
    main()
