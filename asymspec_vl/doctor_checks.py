"""The checks of `asymspec-vl doctor` (doctor.py): tiny models through the vLLM path against the transformers
backend on one attention backend, and the gate kernel against its reference. Each returns Check rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

BF16_LOGIT_TOLERANCE = 0.05  # max |a_vllm - a_transformers| / max |a_transformers| accepted in bf16


@dataclass
class Check:
    name: str
    backend: str
    ok: bool
    detail: str


@dataclass
class AttentionRun:
    """One attention backend configuration to run the checks on."""

    label: str
    dtype: str  # float32: exact agreement required
    engine_kwargs: dict = field(default_factory=dict)


def attention_runs() -> list[AttentionRun]:
    """The CPU backend on the CPU build; on a GPU each backend vLLM 0.19 offers for a Qwen3 model there."""
    from vllm.platforms import current_platform
    from vllm_patches.version import is_cpu_build

    if is_cpu_build():
        return [AttentionRun("CPU_ATTN", "float32")]
    runs = [AttentionRun("TRITON_ATTN", "float32", {"attention_config": {"backend": "TRITON_ATTN"}})]
    capability = current_platform.get_device_capability()
    if capability is not None and capability.major == 9:
        runs.append(AttentionRun("FLASH_ATTN (FA3)", "bfloat16",
                                 {"attention_config": {"backend": "FLASH_ATTN", "flash_attn_version": 3}}))
    runs.append(AttentionRun("FLASH_ATTN (FA2)", "bfloat16",
                             {"attention_config": {"backend": "FLASH_ATTN", "flash_attn_version": 2}}))
    try:
        import flashinfer  # noqa: F401

        runs.append(AttentionRun("FLASHINFER", "bfloat16", {"attention_config": {"backend": "FLASHINFER"}}))
    except ImportError:
        pass
    return runs


def requests():
    """Image requests of different sizes and one text-only request (x_full without an image)."""
    import numpy as np
    from PIL import Image

    from .prompts import Request

    out = []
    for seed in range(5):
        rs = np.random.RandomState(seed)
        h, w = rs.randint(32, 160, 2)
        image = Image.fromarray((rs.rand(h, w, 3) * 255).astype("uint8"))
        out.append(Request(image, f"What is shown in figure {seed}?", caption="a chart with bars " * (1 + seed % 3),
                           ocr=" ".join(str(x) for x in rs.randint(0, 99, seed))))
    out.append(Request(question="What is the answer?", full_context="The answer is 42, said the table.",
                       compressed_context="a table"))
    return out


def summary(results) -> list[tuple]:
    return [(r.token_ids, [t.source for t in r.trace], r.stats.steps, r.stats.accepted) for r in results]


def compare(name: str, run: AttentionRun, got, expected) -> Check:
    same = sum(g == e for g, e in zip(summary(got), summary(expected)))
    detail = f"{same}/{len(expected)} requests equal (tokens, sources, steps)"
    errors = [r for r in got if r.finish_reason == "error"]
    if errors:
        return Check(name, run.label, False, f"{len(errors)} request(s) failed")
    exact = run.dtype == "float32"
    return Check(name, run.label, same == len(expected) if exact else True,
                 detail if exact else detail + " (bf16: reported, not required)")


def drafter_logits_check(vl, hf, run: AttentionRun) -> Check:
    """The drafter's first x_full logits in vLLM against transformers' on the same tokens."""
    import torch
    from vllm_patches import probe

    from .config import AsymSpecConfig
    from .prompts import encode_request

    cfg = AsymSpecConfig(K=2, max_new_tokens=2)
    reqs = requests()[:3]
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", cfg.K)[0])
    probe.capture_full_view_logits(llm)
    vl.generate_batch(reqs, "asymspec", cfg)
    captured = {c["x_full"]: c for c in probe.captured_full_view_logits(llm).values()}
    probe.capture_full_view_logits(llm, on=False)
    worst = 0.0
    for r in reqs:
        enc = encode_request(r, vl.pair.processor, vl.pair.tokenizer)
        c = captured[tuple(enc.full.ids)]
        drafter = hf.backend.drafter
        ids = torch.tensor([enc.full.ids + c["drafts"][:cfg.K - 1]], device=drafter.device)
        with torch.no_grad():
            ref = drafter(input_ids=ids, attention_mask=torch.ones_like(ids),
                          pixel_values=enc.full.pixel_values.to(drafter.device, drafter.dtype),
                          image_grid_thw=enc.full.image_grid_thw.to(drafter.device)).logits[0, -cfg.K:].float().cpu()
        worst = max(worst, float((c["a"] - ref).abs().max() / ref.abs().max()))
    tolerance = 1e-4 if run.dtype == "float32" else BF16_LOGIT_TOLERANCE
    return Check("drafter x_full logits", run.label, worst <= tolerance,
                 f"max relative difference {worst:.2e} (tolerance {tolerance:g})")


def method_checks(paths: dict, run: AttentionRun, device: str) -> list[Check]:
    from .api import AsymSpecVL
    from .config import AsymSpecConfig

    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(**names, device=device, dtype=run.dtype)
    vl = AsymSpecVL.from_pretrained(**names, backend="vllm", dtype=run.dtype, block_size=16, **run.engine_kwargs)
    reqs, checks = requests(), []
    try:
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 4)[0])
        from vllm_patches import probe

        backends = probe.counters(llm)["attention_backends"]
        checks.append(Check("attention backend vLLM selected", run.label, True, ", ".join(backends)))
        cases = [("asymspec K=2", "asymspec", AsymSpecConfig(K=2, max_new_tokens=24)),
                 ("asymspec K=4 (same engine)", "asymspec", AsymSpecConfig(K=4, gamma=0.2, max_new_tokens=24)),
                 ("scd K=2", "scd", AsymSpecConfig(K=2, max_new_tokens=16)),
                 ("sd K=2", "sd", AsymSpecConfig(K=2, max_new_tokens=16)),
                 ("floor", "floor", AsymSpecConfig(K=2, max_new_tokens=16)),
                 ("drafter alone", "drafter", AsymSpecConfig(K=2, max_new_tokens=16))]
        for name, method, cfg in cases:
            checks.append(compare(name, run, vl.generate_batch(reqs, method, cfg), hf.generate_batch(reqs, method, cfg)))
        checks.append(drafter_logits_check(vl, hf, run))
    finally:
        vl.backend.close()
    checks.append(preemption_check(vl, hf, run))
    return checks


def preemption_check(vl, hf, run: AttentionRun) -> Check:
    """A KV cache of 24 blocks of 16 tokens for 6 requests: vLLM preempts and resumes them."""
    from vllm_patches import probe

    from .api import AsymSpecVL
    from .backends.vllm import VLLMBackend
    from .config import AsymSpecConfig

    b = vl.backend
    small = VLLMBackend(b.pair, b.drafter, b.verifier, None, b.dtype, b.tp,
                        {**b.engine_kwargs, "num_gpu_blocks_override": 24})
    cramped, reqs, cfg = AsymSpecVL(vl.pair, small, vl.names), requests(), AsymSpecConfig(K=2, max_new_tokens=48)
    try:
        llm = small.engine(small.engine_for("asymspec", 2)[0])
        check = compare("forced preemption", run, cramped.generate_batch(reqs, "asymspec", cfg),
                        hf.generate_batch(reqs, "asymspec", cfg))
        resumed = probe.counters(llm)["resumptions"]
    finally:
        small.close()
    if not resumed:
        return Check("forced preemption", run.label, False, "no request was preempted")
    return Check(check.name, check.backend, check.ok, f"{resumed} resumption(s); {check.detail}")


def kernel_check(on_gpu: bool) -> Check:
    """The gate kernel against its reference, in a process of its own (the CPU needs triton's interpreter
    switched on before triton is imported)."""
    vocab = 151_936 if on_gpu else 4096
    env = dict(os.environ)
    if not on_gpu:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, "-m", "asymspec_vl.kernels.self_check", "--json", "--vocab", str(vocab),
           "--dtype", "bfloat16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return Check("gate kernel == torch reference", "triton", False, (proc.stderr or proc.stdout)[-300:])
    result = json.loads(lines[-1])
    ok = not result["mismatches"]
    where = "compiled" if on_gpu else "interpreter"
    return Check("gate kernel == torch reference", f"triton ({where}, {result['device']})", ok,
                 f"{result['cases'] - len(result['mismatches'])}/{result['cases']} cases, bf16, V={vocab}")
