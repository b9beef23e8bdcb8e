"""The checks of `asymspec-vl doctor` (doctor.py) on one attention backend: every method through the vLLM path
against the transformers backend, then the row checks (row_checks.py), the logits checks (logits.py), the drafter's
graphs against its eager passes (graphs.py) and a forced preemption; and the gate kernel against its reference.
Each returns Check rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..core.config import AsymSpecConfig
from .backends import AttentionRun
from .cases import Check, compare, requests, say
from .graphs import NAMES as GRAPHS_ROWS
from .graphs import graphs_checks
from .logits import logits_checks
from .row_checks import mixed_waves_check, plain_sampling_check


def method_checks(paths: dict, run: AttentionRun, device: str) -> list[Check]:
    from vllm_patches.probes import probe  # lazy: loads torch

    from ..api import AsymSpecVL  # lazy: loads torch

    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(**names, device=device, dtype=run.dtype)
    vl = AsymSpecVL.from_pretrained(
        **names, backend="vllm", dtype=run.dtype, **run.engine_kwargs()
    )
    reqs, checks = requests(), []
    try:
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 4)[0])
        backends = probe.counters(llm)["attention_backends"]
        checks.append(
            Check.of(
                "attention backend vLLM selected",
                run.label,
                run.backend in backends,
                ", ".join(backends),
            )
        )
        cases = [
            ("asymspec K=2", "asymspec", AsymSpecConfig(K=2, max_new_tokens=24)),
            (
                "asymspec K=4 (same engine)",
                "asymspec",
                AsymSpecConfig(K=4, gamma=0.2, max_new_tokens=24),
            ),
            ("scd K=2", "scd", AsymSpecConfig(K=2, max_new_tokens=16)),
            ("sd K=2", "sd", AsymSpecConfig(K=2, max_new_tokens=16)),
            ("floor", "floor", AsymSpecConfig(K=2, max_new_tokens=16)),
            ("drafter alone", "drafter", AsymSpecConfig(K=2, max_new_tokens=16)),
        ]
        for name, method, cfg in cases:
            say(f"{run.label}: {name} ...")
            checks.append(
                compare(
                    name,
                    run,
                    vl.generate_batch(reqs, method, cfg),
                    hf.generate_batch(reqs, method, cfg),
                )
            )
        say(f"{run.label}: logits a and b ...")
        checks += guarded(
            ["drafter x_full logits a", "drafter x_comp logits b"],
            run,
            logits_checks,
            vl,
            hf,
            run,
        )
        say(f"{run.label}: mixed waves ...")
        checks += guarded(
            ["mixed sd/scd/asymspec waves (rows reused)"],
            run,
            mixed_waves_check,
            vl,
            hf,
            run,
        )
        checks += guarded(
            ["plain request: sampling + logprobs"], run, plain_sampling_check, vl, run
        )
        say(
            f"{run.label}: drafter graphs (a compiled engine of its own on the CPU build) ..."
        )
        checks += guarded(
            GRAPHS_ROWS,
            run,
            graphs_checks,
            vl,
            run,
            lambda: AsymSpecVL.from_pretrained(
                **names,
                backend="vllm",
                dtype=run.dtype,
                enforce_eager=False,
                **run.engine_kwargs(),
            ),
        )  # vl's drafter eager (CPU)
    finally:
        vl.backend.close()
    say(f"{run.label}: forced preemption ...")
    checks += guarded(["forced preemption"], run, preemption_check, vl, hf, run)
    return checks


def guarded(names: list[str], run: AttentionRun, check, *args) -> list[Check]:
    """check(*args) as a list of Checks; an exception fails the checks it would have made, not the others."""
    try:
        out = check(*args)
    except Exception as e:
        return [
            Check.of(name, run.label, False, f"{type(e).__name__}: {e}"[:300])
            for name in names
        ]
    return out if isinstance(out, list) else [out]


def preemption_check(vl, hf, run: AttentionRun) -> Check:
    """A KV cache of 24 blocks of 16 tokens for 6 requests: vLLM preempts and resumes them (on the runs at block
    size 16: with a few blocks of 128 the requests cannot be made to outgrow the cache in the same way)."""
    from vllm_patches.probes import probe  # lazy: loads torch

    from ..api import AsymSpecVL  # lazy: loads torch
    from ..backends.vllm.vllm_backend import VLLMBackend  # lazy: loads torch

    if run.block_size != 16:
        return Check(
            "forced preemption",
            run.label,
            "skipped",
            "checked on this backend's block-size-16 run",
        )
    b = vl.backend
    blocks = 24
    small = VLLMBackend(
        b.pair,
        b.drafter,
        b.verifier,
        None,
        b.dtype,
        b.tp,
        {**b.engine_kwargs, "num_gpu_blocks_override": blocks},
    )
    cramped, reqs, cfg = (
        AsymSpecVL(vl.pair, small, vl.names),
        requests(),
        AsymSpecConfig(K=2, max_new_tokens=48),
    )
    try:
        llm = small.engine(small.engine_for("asymspec", 2)[0])
        check = compare(
            "forced preemption",
            run,
            cramped.generate_batch(reqs, "asymspec", cfg),
            hf.generate_batch(reqs, "asymspec", cfg),
        )
        resumed = probe.counters(llm)["resumptions"]
    finally:
        small.close()
    if not resumed:
        return Check.of(
            "forced preemption",
            run.label,
            False,
            f"no request was preempted ({blocks} KV blocks)",
        )
    return Check(
        check.name,
        check.backend,
        check.result,
        f"{resumed} resumption(s); {check.detail}",
    )


def kernel_check(on_gpu: bool, reference: str | None = None) -> Check:
    """The gate kernel against its reference, in a process of its own (the CPU needs triton's interpreter
    switched on before triton is imported); reference: the torch reference's dtype (None: the kernel's, bf16)."""
    vocab = 151_936 if on_gpu else 4096
    env = dict(os.environ)
    if not on_gpu:
        env["TRITON_INTERPRET"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "asymspec_vl.doctor.kernels",
        "self-check",
        "--json",
        "--vocab",
        str(vocab),
        "--dtype",
        "bfloat16",
    ] + (["--reference", reference] if reference else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return Check.of(
            "gate kernel == torch reference",
            "triton",
            False,
            (proc.stderr or proc.stdout)[-300:],
        )
    result = json.loads(lines[-1])
    where = "compiled" if on_gpu else "interpreter"
    return Check.of(
        "gate kernel == torch reference",
        f"triton ({where}, {result['device']})",
        not result["mismatches"],
        f"{result['cases'] - len(result['mismatches'])}/{result['cases']} cases, bf16, V={vocab}"
        + (f", reference {reference}" if reference else ""),
    )
