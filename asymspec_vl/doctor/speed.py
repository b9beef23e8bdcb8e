"""`asymspec-vl doctor --speed`: Floor and AsymSpec tokens/s on this machine, with the drafter eager and compiled
(on CUDA: with its CUDA graphs), the per-step split (verifier forward, x_comp pass, gate, x_full drafting) and
the bound MAL * c_v / ((K + 1) c_d + c_v) that split implies, all measured by evals/benchmarks/bench_vllm.py, run
as a program of its own (the evals sit above the doctor; its engines get the device to themselves).

On CUDA: bench_vllm's sized shapes (random weights: a drafter shaped like Qwen3-VL-2B, a verifier like Qwen3-32B
by default). Without CUDA the sized row is skipped with the reason and the tiny pair runs instead (what a CPU
runs: it shows the rows, not a GPU's speed).

What the speed-up means: it is measured at the acceptance the run had. With random weights p_t and p_b are both
near uniform, so the gate passes nearly every draft (acceptance ~1.00, mean accepted length MAL ~ (K + 1)
tokens a step): the row is the cost side of AsymSpec at that MAL, an upper bound of what trained models give.
Tokens a step scale with MAL at a fixed per-step cost, so a user's measured mean accepted length L turns the
row's figure x into about x * L / MAL (`speedup_at`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .cases import Check

BENCH = "asymspec_vl.evals.benchmarks.bench_vllm"
SIZED = "speed: sized shapes (random weights)"
SPLIT = (
    ("verifier", "verifier"),
    ("base_pass", "x_comp pass"),
    ("gate", "gate"),
    ("draft", "x_full drafting"),
)


def speed_checks(
    on_gpu: bool,
    platform_name: str,
    verifier_size: str = "32b",
    requests: int = 1,
    tokens: int = 128,
) -> list[Check]:
    """The sized run on CUDA (skipped elsewhere, with the reason), else the tiny pair's."""
    if on_gpu:
        return sized_checks("2b", verifier_size, requests, tokens, "graphs")
    skipped = Check(
        SIZED,
        f"drafter 2b, verifier {verifier_size}",
        "skipped",
        f"needs a CUDA GPU (vLLM platform here: {platform_name}); the tiny pair's rows below show "
        f"the table, not a GPU's speed",
    )
    return [skipped] + bench_checks(
        ["--models", "tiny", "--requests", str(requests), "--tokens", "16"],
        "tiny pair (CPU)",
        "compiled",
    )


def sized_checks(
    drafter_size: str,
    verifier_size: str,
    requests: int,
    tokens: int,
    compiled_name: str,
) -> list[Check]:
    """bench_vllm's sized shapes: config-only folders, weights from vLLM's dummy loader ("mini" shapes: the
    CPU stand-in the tests run)."""
    label = f"sized: drafter {drafter_size}, verifier {verifier_size}"
    args = [
        "--models",
        "sized",
        "--drafter-size",
        drafter_size,
        "--verifier-size",
        verifier_size,
        "--requests",
        str(requests),
        "--tokens",
        str(tokens),
    ]
    return bench_checks(args, label, compiled_name)


def bench_checks(args: list[str], label: str, compiled_name: str) -> list[Check]:
    """bench_vllm with args, Floor and AsymSpec, eager and compiled: one row per (mode, method), then AsymSpec
    over the Floor per mode. A failed run is one failed row with the end of its log."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            BENCH,
            *args,
            "--methods",
            "floor,asymspec",
            "--modes",
            "eager,compiled",
            "--out",
            out,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        table = Path(out) / "bench_vllm.json"
        if proc.returncode != 0 or not table.exists():
            tail = [
                ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()
            ][-3:]
            return [
                Check.of(
                    "speed: bench_vllm",
                    label,
                    False,
                    f"exit {proc.returncode}: " + " / ".join(tail)[-300:],
                )
            ]
        rows = json.loads(table.read_text())["rows"]
    return speed_rows(rows, label, compiled_name)


def speed_rows(
    rows: list[dict], label: str, compiled_name: str = "compiled"
) -> list[Check]:
    """bench_vllm's rows as report rows: tokens/s and the per-step split of each, AsymSpec's speed-up over the
    Floor and its bound per mode."""

    def mode(row: dict) -> str:
        return compiled_name if row["mode"] == "compiled" else row["mode"]

    out = []
    for row in rows:
        detail = f"{row['tokens_per_s']:.1f} tokens/s ({row['tokens']} tokens in {row['seconds']:.2f} s)"
        if "verifier_ms_per_step" in row:
            split = ", ".join(
                f"{name} {row[f'{key}_ms_per_step']:.2f}"
                for key, name in SPLIT
                if f"{key}_ms_per_step" in row
            )
            detail += f"; per step (ms): {split}; MAL {row['mean_accepted_length']:.2f}"
        out.append(
            Check(f"speed: {row['method']}, drafter {mode(row)}", label, "ok", detail)
        )
    for row in rows:
        if row["method"] == "asymspec" and "x_floor" in row:
            bound = f" (bound {row['bound']:.2f}x)" if "bound" in row else ""
            detail = f"{row['x_floor']:.2f}x the Floor's tokens/s{bound}"
            if "mean_accepted_length" in row:
                mal = row["mean_accepted_length"]
                detail += (
                    f" at acceptance {row['acceptance_rate']:.2f}, MAL {mal:.2f}: the cost side at that "
                    f"acceptance, not a user's speed-up; at a measured mean accepted length L, about "
                    f"{row['x_floor']:.2f} * L / {mal:.2f}x"
                )
            out.append(
                Check(
                    f"speed: asymspec / floor, drafter {mode(row)}", label, "ok", detail
                )
            )
    return out


def speedup_at(x_measured: float, mal_measured: float, mal: float) -> float:
    """The speed-up over the Floor at mean accepted length `mal`, from one measured at `mal_measured` with the
    same per-step cost: tokens a step scale with MAL, the step's time does not."""
    return x_measured * mal / mal_measured
