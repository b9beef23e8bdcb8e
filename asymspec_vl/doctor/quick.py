"""`asymspec-vl doctor --quick`: a first check of this machine's vLLM path in at most 8 minutes on one H100 / H200
(engine starts and the vLLM import included; the CPU build runs the same rows in under 15 minutes on 2 cores).
Rows, in this order, each printed as it finishes (a progress line on stderr, the row on stdout; with --json the
file is rewritten after each step), so a run cut short still says what it saw:
  1. gate kernel        the Triton gate kernel against the torch reference in float64, bf16 inputs (compiled at
                        V = 151,936 on a GPU; Triton's interpreter at V = 4,096 on the CPU)
  2. sampler memory     each rule's transient peak over one group of 64 rows at K = 4 (logprobs 20 and none, one
                        vocabulary and across a map): at most 16 [64, V] float32 blocks (bench_sampler_memory.py;
                        CUDA's allocator at Qwen's and Llama-3's vocabularies, the CPU profiler at V = 4,096)
     top-k / top-p      vLLM's Triton filter against ours (topk_filter.py: how many rows they keep differently is
                        reported; a seeded batch must keep ours and draw our tokens)
  3. compile-cache key  two asymspec-vl versions, two drafter layouts and a stock draft_model engine: distinct keys
     compiled engine    an asymspec engine compiled (CUDA graphs on a GPU), first traced at its whole token budget,
                        on the exact attention backend (TRITON_ATTN float32 on a GPU, CPU_ATTN on the CPU build):
                        tokens, sources, steps equal to the transformers backend's, and its graphs equal its eager
                        passes (graphs.py)
  4. cross family       the embedded Qwen-drafter / Llama-verifier pair (two tokenizers) through vLLM against
                        transformers, asymspec K = 2
Exit 1 when a row failed. The full doctor (without --quick) stays the longer check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..quiet import stdout_to_stderr
from ..toy.tiny import write_tiny_models
from .backends import (
    DRAFTER_SIZES,
    RUNS,
    VERIFIER_SIZES,
    AttentionRun,
    head_sizes,
    verdict,
)
from .cases import START, Check, compare, requests, say
from .checks import guarded, kernel_check
from .compile_key import NAME as COMPILE_KEY
from .compile_key import compile_key_check
from .graphs import NAMES as GRAPHS_ROWS
from .graphs import graphs_checks
from .precision import exact_float32

MEMORY_BOUND_BLOCKS = 16.0  # a group's peak, in [64, V] float32 blocks (tests/vllm_patches/test_sampler_memory.py)
CPU_VOCAB = 4096  # the interpreter's and the CPU profiler's V (Qwen's 151,936 on a GPU)
BUDGET = 256  # the compiled engine's max_num_batched_tokens: its first trace
COMPILED = "compiled engine (whole budget first) == transformers"
CROSS = "cross-family pair (embedded-llama) == transformers"
TOPK = "vLLM's Triton top-k/top-p vs ours"
HEADER = "| check | backend | result | detail |\n|---|---|---|---|"


@dataclass
class Machine:
    """What the rows run on: the tiny pair's folders, the exact attention run, CUDA or not."""

    paths: dict
    run: AttentionRun
    on_gpu: bool


@dataclass(frozen=True)
class Step:
    title: str
    names: list[str]  # the rows a failure of the whole step fails
    rows: Callable[[Machine], list[Check]]


def gate_rows(m: Machine) -> list[Check]:
    return [kernel_check(m.on_gpu, reference="float64")]


def sampler_memory_rows(m: Machine) -> list[Check]:
    """bench_sampler_memory at B = 64, K = 4 (its own process): one row per rule, its worst after chunking."""
    args = ["--B", "64", "--K", "4", "--device", "cuda" if m.on_gpu else "cpu"]
    if not m.on_gpu:
        v = CPU_VOCAB
        args += [
            "--vocab",
            str(v),
            "--vocab-v",
            str(v * 27 // 32),
            "--shared",
            str(v * 23 // 32),
        ]
        args += ["--budget", str(12 * 5 * v)]  # row_chunks' 12 rows at K = 4, at this V
    out = _run_module("asymspec_vl.evals.benchmarks.bench_sampler_memory", args, {})
    return memory_checks(out, "cuda" if m.on_gpu else "cpu")


def memory_checks(table: str, device: str) -> list[Check]:
    """One Check per rule from bench_sampler_memory's table: the worst 'after' peak within MEMORY_BOUND_BLOCKS."""
    worst: dict[str, tuple[float, float]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or cells[0] not in ("same", "cross"):
            continue
        before, after = float(cells[3]), float(cells[5])
        w = worst.get(cells[1], (0.0, 0.0))
        worst[cells[1]] = (max(w[0], before), max(w[1], after))
    if not worst:
        return [
            Check.of("sampler peak memory", device, False, f"no table: {table[-300:]}")
        ]
    return [
        Check.of(
            f"sampler peak memory: {rule}",
            device,
            after <= MEMORY_BOUND_BLOCKS,
            f"{after:g} [64, V] float32 blocks (bound {MEMORY_BOUND_BLOCKS:g}; one unchunked call {before:g})",
        )
        for rule, (before, after) in worst.items()
    ]


def topk_rows(m: Machine) -> list[Check]:
    vocab = 151_936 if m.on_gpu else CPU_VOCAB
    env = {} if m.on_gpu else {"TRITON_INTERPRET": "1"}
    out = _run_module(
        "asymspec_vl.doctor.topk_filter", ["--json", "--vocab", str(vocab)], env
    )
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        return [Check.of(TOPK, "triton", False, out[-300:])]
    r = json.loads(lines[-1])
    where = "compiled" if m.on_gpu else "interpreter"
    return [
        Check.of(
            TOPK,
            f"triton ({where}, {r['device']})",
            r["seeded_kept_equal"] and r["seeded_tokens_equal"],
            f"vLLM's Triton filter keeps another set in {r['differing_rows']}/{r['rows']} rows (top_p 0.9, bf16, "
            f"V={vocab}); a seeded batch keeps ours {r['seeded_kept_equal']}, draws ours {r['seeded_tokens_equal']}",
        )
    ]


def compile_key_rows(m: Machine) -> list[Check]:
    return [compile_key_check(m.paths)]


def compiled_engine_rows(m: Machine) -> list[Check]:
    """The compiled engine against transformers, then its graphs against its eager passes (graphs.py)."""
    from vllm_patches.probes import probe  # lazy: loads torch

    from ..api import AsymSpecVL  # lazy: loads torch
    from ..core.config import AsymSpecConfig  # lazy: loads torch

    names = dict(drafter=str(m.paths["vl_drafter"]), verifier=str(m.paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(
        **names, device="cuda" if m.on_gpu else "cpu", dtype=m.run.dtype
    )
    vl = AsymSpecVL.from_pretrained(
        **names,
        backend="vllm",
        dtype=m.run.dtype,
        enforce_eager=False,
        max_num_batched_tokens=BUDGET,
        **m.run.engine_kwargs(),
    )
    try:
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
        if not probe.drafter_graphs(llm)["compiled"]:
            return [Check.of(COMPILED, m.run.label, False, "the drafter runs eagerly")]
        cfg, reqs = AsymSpecConfig(K=2, max_new_tokens=24), requests()
        tokens = compare(
            COMPILED,
            m.run,
            vl.generate_batch(reqs, "asymspec", cfg),
            hf.generate_batch(reqs, "asymspec", cfg),
        )
        return [tokens, *graphs_checks(vl, m.run)]
    finally:
        vl.backend.close()


def cross_family_rows(m: Machine) -> list[Check]:
    from ..api import AsymSpecVL  # lazy: loads torch
    from ..core.config import AsymSpecConfig  # lazy: loads torch
    from ..inputs.prompts import Request  # lazy: loads torch
    from ..toy import world  # lazy: renders the toy world

    hf = AsymSpecVL.from_pretrained(
        verifier="embedded-llama",
        device="cuda" if m.on_gpu else "cpu",
        dtype=m.run.dtype,
    )
    vl = AsymSpecVL.from_pretrained(
        verifier="embedded-llama",
        backend="vllm",
        dtype=m.run.dtype,
        **m.run.engine_kwargs(),
    )
    reqs = [Request(e.image(), e.question, caption=e.caption) for e in world.heldout(6)]
    cfg = AsymSpecConfig(K=2, max_new_tokens=16)
    try:
        return [
            compare(
                CROSS,
                m.run,
                vl.generate_batch(reqs, "asymspec", cfg),
                hf.generate_batch(reqs, "asymspec", cfg),
            )
        ]
    finally:
        vl.backend.close()


STEPS = (
    Step(
        "the gate kernel against float64", ["gate kernel == torch reference"], gate_rows
    ),
    Step(
        "the sampler's peak memory per rule",
        ["sampler peak memory"],
        sampler_memory_rows,
    ),
    Step("vLLM's Triton top-k / top-p against our filter", [TOPK], topk_rows),
    Step("the compile-cache key", [COMPILE_KEY], compile_key_rows),
    Step(
        "a compiled engine first traced at the whole budget",
        [COMPILED, *GRAPHS_ROWS],
        compiled_engine_rows,
    ),
    Step("one cross-family pair", [CROSS], cross_family_rows),
)


def exact_run(platform) -> AttentionRun:
    """The float32 attention run this machine takes: CPU_ATTN on the CPU build, TRITON_ATTN on CUDA."""
    heads = head_sizes(DRAFTER_SIZES, VERIFIER_SIZES)
    return next(
        r for r in RUNS if r.exact and verdict(r, heads, platform).result == "run"
    )


def run_quick(out: str | None, environment: Callable[[], list]) -> int:
    """Every step in order; each row printed as it finishes; 1 if a row failed. environment(): the versions the
    report states (cli.environment, which imports vLLM)."""
    START[:] = [time.monotonic()]
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import torch  # lazy: loads torch
    from vllm.platforms import current_platform  # lazy: loads vLLM

    versions, checks = environment(), []
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as tmp, exact_float32():
        with stdout_to_stderr():
            paths = write_tiny_models(
                tmp, seed=0, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES
            )
        machine = Machine(paths, exact_run(current_platform), torch.cuda.is_available())
        for step in STEPS:
            checks += run_step(step, machine)
            _write(out, versions, checks)
    failed = [c for c in checks if c.failed]
    print(
        f"\n{len(checks) - len(failed)}/{len(checks)} quick checks passed, {len(failed)} failed",
        flush=True,
    )
    return 1 if failed else 0


def run_step(step: Step, machine: Machine) -> list[Check]:
    """One step's rows (an exception fails its rows, not the run), each printed as it finishes."""
    say(f"{step.title} ...")
    with stdout_to_stderr():
        rows = guarded(step.names, machine.run, step.rows, machine)
    for c in rows:
        say(f"{c.name}: {'FAILED' if c.failed else c.result}")
        print(
            f"| {c.name} | {c.backend} | {'FAILED' if c.failed else c.result} | {c.detail} |",
            flush=True,
        )
    return rows


def _write(out: str | None, versions: list, checks: list[Check]) -> None:
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(
                {"environment": versions, "checks": [c.as_dict() for c in checks]},
                f,
                indent=2,
            )


def _run_module(module: str, args: list[str], env: dict) -> str:
    """python -m module args in a process of its own; its stdout, or its stderr's tail where it failed."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    if proc.returncode != 0 and not proc.stdout.strip():
        raise RuntimeError(f"{module} exited {proc.returncode}: {proc.stderr[-300:]}")
    return proc.stdout
