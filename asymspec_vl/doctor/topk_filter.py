"""vLLM's Triton top-k / top-p filter against ours, on this machine (a row of `asymspec-vl doctor --quick`):

    python -m asymspec_vl.doctor.topk_filter [--vocab 151936] [--json]

On ROWS bf16-rounded logits rows at top_p TOP_P: how many rows vLLM's Triton pivot search
(v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton, which forward_native runs for a batch of 8 or more
rows) keeps another set in than core/sampling.filtered_logprobs (reported: the two rules differ, issue 44 item 2),
and whether a seeded batch through vLLM's TopKTopPSampler.forward_native, with the plugin applied and vLLM's
GPU dispatch (HAS_TRITON), keeps our set and draws our tokens (required: hooks/plain_sampler_patch.py). On a CUDA
device the compiled kernel runs; elsewhere the kernel's module runs in Triton's interpreter, which needs
TRITON_INTERPRET=1 before triton is imported (the doctor starts this in a process of its own for that).
"""

from __future__ import annotations

import argparse
import json
import sys
import types

import torch

from ..core.config import AsymSpecConfig
from ..core.sampling import draw, filtered_logprobs

ROWS, TOP_P = 8, 0.9
H100_SMS = (
    132  # the interpreter's stand-in for num_compute_units (the CPU platform has none)
)


def vllm_triton_filter():
    """vLLM's apply_top_k_top_p_triton: as it is on a GPU; else its module run under Triton's interpreter (vLLM's
    own import of Triton is a placeholder without an active driver)."""
    import vllm.v1.sample.ops.topk_topp_triton as kernel_module  # lazy: loads vLLM

    if torch.cuda.is_available():
        return kernel_module.apply_top_k_top_p_triton
    source = open(kernel_module.__file__).read()
    source = source.replace(
        "from vllm.triton_utils import tl, triton",
        "import triton\nimport triton.language as tl",
    )
    module = types.ModuleType("vllm_topk_topp_interpreted")
    module.__file__ = kernel_module.__file__
    sys.modules[module.__name__] = module
    exec(compile(source, kernel_module.__file__, "exec"), module.__dict__)
    module.num_compute_units = lambda index: H100_SMS
    return module.apply_top_k_top_p_triton


def bf16_logits(vocab: int, device) -> torch.Tensor:
    """[ROWS, vocab] float32 logits rounded through bf16 (a GPU engine's), ties among them."""
    g = torch.Generator().manual_seed(0)
    return (torch.randn(ROWS, vocab, generator=g) * 3).bfloat16().float().to(device)


def compare(vocab: int) -> dict:
    """{"device", "vocab", "rows", "differing_rows" (vLLM's Triton kept set != ours), "seeded_kept_equal",
    "seeded_tokens_equal" (a seeded batch through the patched forward_native)}."""
    import vllm.v1.sample.ops.topk_topp_sampler as ops  # lazy: loads vLLM

    import vllm_patches  # lazy: installs the hooks

    vllm_patches.apply()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    triton_filter = vllm_triton_filter()
    ops.HAS_TRITON, ops.apply_top_k_top_p_triton = True, triton_filter  # GPU dispatch
    logits = bf16_logits(vocab, device)
    p = torch.full((ROWS,), TOP_P, device=device)
    ours = filtered_logprobs(logits, AsymSpecConfig(temperature=1.0, top_p=TOP_P))
    theirs = triton_filter(logits.clone(), None, p)
    seeds = range(ROWS)
    gens = {
        i: torch.Generator(device=device).manual_seed(s) for i, s in enumerate(seeds)
    }
    sampler = ops.TopKTopPSampler(logprobs_mode="processed_logits")
    tokens, processed = sampler.forward_native(logits.clone(), gens, None, p)
    want = draw(ours, [torch.Generator(device=device).manual_seed(s) for s in seeds])
    return {
        "device": device,
        "vocab": vocab,
        "rows": ROWS,
        "differing_rows": int((theirs.isfinite() != ours.isfinite()).any(-1).sum()),
        "seeded_kept_equal": bool(torch.equal(processed.isfinite(), ours.isfinite())),
        "seeded_tokens_equal": tokens.tolist() == want.tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--vocab", type=int, default=151_936, help="V (Qwen3's by default)")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args(argv)
    result = compare(args.vocab)
    print(json.dumps(result) if args.json else result)
    return 0 if result["seeded_kept_equal"] and result["seeded_tokens_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
