"""Benchmark: the transient memory of the asymspec engine's sampler per rule, one group of B rows at K drafts, with
its rows decided in chunks (core/row_chunks.py) and in one call (the sampler before issue 43).

    python -m asymspec_vl.evals.benchmarks.bench_sampler_memory [--B 64] [--K 4] [--logprobs 20]
                                                                [--families same,cross] [--device cpu]
                                                                [--vocab 151936] [--vocab-v 128256]
                                                                [--shared 109566] [--budget ENTRIES]

Each rule runs through vllm_patches.sampler.sample on dummy rows (vllm_patches/sampler_profile.py, the rows vLLM's
memory profile runs): asymspec, sd, scd and floor (no drafts), greedy and sampled (temperature 0.7 with min_p,
top_k and top_p on), min_tokens holding a stop token, without and with logprobs. The families: one vocabulary of
Qwen's 151,936 tokens; a cross-family pair of Qwen3 (Vd = 151,936) and Llama-3 (Vv = 128,256) sharing 109,566
tokens (a random map of those sizes; --vocab, --vocab-v and --shared change them, --budget a chunk's entries).
The verifier's logits [B * (n + 1), Vv] float32 exist before the call (vLLM's); everything the call allocates
counts, the drafter's logits it reads included (float32; the x_comp pass and the stored a hand it new tensors).
The peak is the most bytes live at once during the call above the bytes live before it: on the CPU summed from
the torch profiler's memory events (deterministic, no timing; greedy AsymSpec there is the torch path, on CUDA
the fused kernel), on CUDA the caching allocator's peak. Printed in MiB and in [B, V] float32 blocks (V the
wider vocabulary).
"""

from __future__ import annotations

import argparse

import torch
from asymspec_vl.evals.benchmarks.bench_vocab_map import SHARED, random_map
from asymspec_vl.evals.report import markdown_table

from asymspec_vl.commands import positive_int
from asymspec_vl.core import row_chunks
from asymspec_vl.core.config import AsymSpecConfig
from vllm_patches.sampler_profile import dummy_step

V_QWEN, V_LLAMA3 = 151_936, 128_256
METHODS = ("asymspec", "sd", "scd", "floor")
UNCHUNKED = 1 << 62  # a chunk budget no group reaches: one call over every row
COLUMNS = [
    "family",
    "rule",
    "logprobs",
    "before blocks",
    "before MiB",
    "after blocks",
    "after MiB",
    "rows per chunk",
]


def peak_bytes(fn, device: str = "cpu") -> int:
    """The most bytes fn() holds at once above what was live when it started (its result included)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile  # lazy: loads the profiler

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True
    ) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def measure(
    method: str,
    samples: bool,
    B: int,
    K: int,
    num_logprobs: int | None,
    vocab_v: int,
    vocab_d: int,
    vmap=None,
    budget: int | None = None,
    device: str = "cpu",
) -> int:
    """Peak bytes of one sampler step of B dummy rows of a rule, its chunks of `budget` entries (None: the
    default, row_chunks.CHUNK_ELEMENTS)."""
    from vllm.v1.sample.sampler import Sampler  # lazy: loads vLLM

    n = K if method != "floor" else 0
    logits = torch.randn(B * (n + 1), vocab_v, device=device)  # [B * (n + 1), Vv]
    saved = row_chunks.CHUNK_ELEMENTS
    row_chunks.CHUNK_ELEMENTS = budget if budget is not None else saved
    try:
        return peak_bytes(
            lambda: dummy_step(
                method,
                samples,
                logits,
                n,
                vocab_d,
                torch.float32,
                Sampler("raw_logprobs"),
                num_logprobs,
                vmap,
            ),
            device,
        )
    finally:
        row_chunks.CHUNK_ELEMENTS = saved


def rows(args) -> list[dict]:
    out = []
    families = {
        "same": (args.vocab, args.vocab, None),
        "cross": (
            args.vocab_v,
            args.vocab,
            random_map(args.vocab, args.vocab_v, args.shared),
        ),
    }
    for family in args.families:
        vocab_v, vocab_d, vmap = families[family]
        block = args.B * max(vocab_v, vocab_d) * 4
        for method in METHODS:
            for samples in (False, True):
                for k in (None, args.logprobs):
                    peaks = [
                        measure(
                            method,
                            samples,
                            args.B,
                            args.K,
                            k,
                            vocab_v,
                            vocab_d,
                            vmap,
                            budget,
                            args.device,
                        )
                        for budget in (UNCHUNKED, args.budget)
                    ]
                    n = args.K if method != "floor" else 0
                    out.append(
                        {
                            "family": family,
                            "rule": f"{method} {'sampled' if samples else 'greedy'}",
                            "logprobs": k if k is not None else "-",
                            "before blocks": round(peaks[0] / block, 1),
                            "before MiB": round(peaks[0] / 2**20, 1),
                            "after blocks": round(peaks[1] / block, 1),
                            "after MiB": round(peaks[1] / 2**20, 1),
                            "rows per chunk": row_chunks.rows_per_chunk(
                                n + 1, max(vocab_v, vocab_d), args.budget
                            ),
                        }
                    )
                    print(
                        markdown_table(out[-1:], COLUMNS).splitlines()[-1], flush=True
                    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=positive_int, default=64)
    ap.add_argument("--K", type=positive_int, default=AsymSpecConfig.K)
    ap.add_argument("--logprobs", type=positive_int, default=20)
    ap.add_argument(
        "--families",
        type=lambda s: s.split(","),
        default=["same", "cross"],
        help="comma-separated: same, cross",
    )
    ap.add_argument("--vocab", type=positive_int, default=V_QWEN)
    ap.add_argument("--vocab-v", type=positive_int, default=V_LLAMA3)
    ap.add_argument("--shared", type=positive_int, default=SHARED)
    ap.add_argument("--budget", type=positive_int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=positive_int, default=1)
    args = ap.parse_args(argv)
    bad = set(args.families) - {"same", "cross"}
    if bad:
        ap.error(f"--families: unknown {sorted(bad)} (same, cross)")
    if args.shared > min(args.vocab, args.vocab_v):
        ap.error("--shared: at most the smaller vocabulary")
    torch.set_num_threads(args.threads)
    print(markdown_table([], COLUMNS), flush=True)
    table = rows(args)
    worst = max(table, key=lambda r: r["after blocks"])
    print(
        f"\nworst after chunking: {worst['rule']} ({worst['family']}, logprobs {worst['logprobs']}): "
        f"{worst['after blocks']} [B, V] float32 blocks, {worst['after MiB']} MiB"
    )


if __name__ == "__main__":
    main()
