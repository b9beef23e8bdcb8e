"""Benchmark: floor, sd, drafter-alone and asymspec through vLLM, side by side: tokens/s, acceptance,
the per-step time of each AsymSpec phase (verifier forward, the drafter's base pass on x_comp, the
gate/fusion sampler, the x_full drafting), with the drafter eager and compiled, and the speedup bound each
split implies beside the measured speedup over the Floor.

    python -m asymspec_vl.evals.benchmarks.bench_vllm [--models tiny|embedded|sized] [--cost-ratio R]
        [--modes eager,compiled] [--requests 8] [--tokens 64] [--K 2] [--verifier-size 8b]
        [--drafter-size 2b] [--tensor-parallel-size 1] [--out DIR]

tiny      the tiny random models (what CPU machines can run).
embedded  the embedded toy pair on held-out toy questions; --cost-ratio R > 1 swaps in the heavy verifier
          (`asymspec-vl toy heavy`: the same logits at R x the cost).
sized     random weights at real sizes, from configs alone (vLLM's dummy weight loader): a drafter shaped
          like Qwen3-VL-2B-Instruct and a verifier shaped like a Qwen3 model (--verifier-size), with the
          tiny tokenizer inside the real 151,936-row vocabulary; meant for a GPU. "mini" shapes run anywhere.
Modes: eager (enforce_eager=True: nothing compiled) and compiled (vLLM's compilation for the verifier and
the drafter's decode-shaped passes; on CUDA their CUDA graphs; vllm_patches/drafter/drafter_graphs.py).
The bound: with c_v the verifier's forward per step and c_d = (x_comp pass + x_full drafting) / (K + 1) the
drafter's, a step emitting MAL tokens is at most MAL * c_v / ((K + 1) c_d + c_v) x the Floor (speed_measure.py).
Stop tokens are disabled so every request reaches --tokens; each engine is started and warmed up on one
request before its timed batch.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from asymspec_vl.evals.report import markdown_table, write_table
from asymspec_vl.evals.toy.eval import request_of
from PIL import Image

from asymspec_vl import AsymSpecConfig, AsymSpecVL, Request
from asymspec_vl.commands import parse_methods
from asymspec_vl.quiet import stdout_to_stderr
from asymspec_vl.toy import world
from asymspec_vl.toy.heavy import source_folder, write_heavy_verifier
from asymspec_vl.toy.tiny import write_tiny_models

METHODS = ("floor", "sd", "drafter", "asymspec")
# Text-model shapes of the published Qwen3 configs (hidden, intermediate, layers, heads, kv heads, tied).
VERIFIER_SIZES = {
    "mini": (256, 768, 4, 4, 2, True),
    "0.6b": (1024, 3072, 28, 16, 8, True),
    "8b": (4096, 12288, 36, 32, 8, False),
    "32b": (5120, 25600, 64, 64, 8, False),
}
# Qwen3-VL-2B-Instruct: text (hidden, intermediate, layers, heads, kv heads), vision (depth, hidden,
# intermediate, heads, DeepStack layers).
DRAFTER_SIZES = {
    "mini": ((256, 768, 4, 4, 2), (4, 128, 512, 4, [1, 2, 3])),
    "2b": ((2048, 6144, 28, 16, 8), (24, 1024, 4096, 16, [5, 11, 17])),
}
VOCAB = 151936


def write_sized_models(
    root: Path, verifier_size: str, drafter_size: str
) -> dict[str, Path]:
    """Config-only model folders of real shapes (tokenizer and processor files from the tiny writer)."""

    paths = write_tiny_models(root)
    h, i, n, a, kv, tied = VERIFIER_SIZES[verifier_size]
    _edit(paths["verifier"], _text(h, i, n, a, kv, tied))
    (h, i, n, a, kv), (depth, vh, vi, va, deepstack) = DRAFTER_SIZES[drafter_size]
    text = _text(
        h,
        i,
        n,
        a,
        kv,
        True,
        rope_theta=5_000_000.0,
        rope_scaling={
            "rope_type": "default",
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    )
    _edit(
        paths["vl_drafter"],
        {
            "text_config": text,
            "vision_config": {
                "depth": depth,
                "hidden_size": vh,
                "intermediate_size": vi,
                "num_heads": va,
                "out_hidden_size": h,
                "num_position_embeddings": 2304,
                "deepstack_visual_indexes": deepstack,
            },
        },
    )
    for name in (
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    ):  # real-image pixel budget
        f = paths["vl_drafter"] / name
        if f.exists():
            cfg = json.loads(f.read_text())
            cfg["size"] = {"shortest_edge": 64 * 64, "longest_edge": 1024 * 1024}
            f.write_text(json.dumps(cfg, indent=2))
    return {
        "drafter": paths["vl_drafter"],
        "verifier": paths["verifier"],
        "text_drafter": None,
    }


def _text(h, i, n, a, kv, tied, **extra) -> dict:
    return {
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": n,
        "num_attention_heads": a,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "vocab_size": VOCAB,
        "tie_word_embeddings": tied,
        "max_position_embeddings": 40960,
        **extra,
    }


def _edit(folder: Path, changes: dict) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        cfg[key] = (
            {**cfg[key], **value}
            if isinstance(value, dict) and isinstance(cfg.get(key), dict)
            else value
        )
    for part in (cfg, cfg.get("text_config", {})):
        part.pop(
            "layer_types", None
        )  # per-layer list of the tiny depth: rebuilt from num_hidden_layers
    cfg["dtype"] = "bfloat16"
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in folder.glob("*.safetensors"):
        f.unlink()  # weights come from vLLM's dummy loader


def requests(n: int, side: int, seed: int = 0) -> list[Request]:
    rs = np.random.RandomState(seed)
    reqs = []
    for k in range(n):
        h, w = rs.randint(side // 2, side + 1, 2)
        image = Image.fromarray((rs.rand(h, w, 3) * 255).astype("uint8"))
        reqs.append(
            Request(
                image,
                f"What is the value of bar {k}? Think step by step.",
                caption="A bar chart of yearly sales with a legend and axis labels. "
                * (1 + k % 3),
                ocr=" ".join(str(x) for x in rs.randint(0, 1000, 8)),
            )
        )
    return reqs


def bench(
    vl: AsymSpecVL, method: str, reqs: list[Request], cfg: AsymSpecConfig
) -> dict:
    from vllm_patches.probes import probe  # lazy: loads torch

    vl.generate_batch(
        reqs[:1], method, cfg.replace(max_new_tokens=4)
    )  # start + warm the engine
    llm = vl.backend.engine(vl.backend.engine_for(method, cfg.K)[0])
    speculative = method in ("sd", "asymspec")
    if speculative:
        probe.start_timing(llm)
    t0 = time.perf_counter()
    results = vl.generate_batch(reqs, method, cfg)
    elapsed = time.perf_counter() - t0
    row = {
        "method": method,
        "requests": len(reqs),
        "tokens": sum(r.stats.emitted for r in results),
        "seconds": elapsed,
    }
    row["tokens_per_s"] = row["tokens"] / elapsed
    if speculative:
        drafted = sum(r.stats.drafted for r in results)
        row["acceptance_rate"] = sum(r.stats.accepted for r in results) / max(
            drafted, 1
        )
        row["mean_accepted_length"] = row["tokens"] / max(
            sum(r.stats.steps for r in results), 1
        )
        timing = probe.stop_timing(llm)
        for phase, s in timing["seconds"].items():
            row[f"{phase}_ms_per_step"] = 1e3 * s / max(timing["steps"], 1)
    vl.backend.close()
    return row


def load_models(args, root: Path) -> tuple[dict, dict, list[Request]]:
    """(model paths, engine kwargs, requests) of --models."""
    engine_kwargs = {"tensor_parallel_size": args.tensor_parallel_size}
    if args.models == "tiny":
        p = write_tiny_models(root)
        models = {
            "drafter": p["vl_drafter"],
            "verifier": p["verifier"],
            "text_drafter": p["text_drafter"],
        }
        return models, engine_kwargs, requests(args.requests, args.image_side or 128)
    if args.models == "embedded":
        verifier = (
            write_heavy_verifier(
                root / f"verifier-R{args.cost_ratio:g}", args.cost_ratio
            )
            if args.cost_ratio > 1
            else source_folder()
        )
        models = {"drafter": "embedded", "verifier": verifier, "text_drafter": None}
        return (
            models,
            {**engine_kwargs, "dtype": "float32"},
            [request_of(e) for e in world.heldout(args.requests)],
        )
    models = write_sized_models(root, args.verifier_size, args.drafter_size)
    engine_kwargs.update(load_format="dummy", max_model_len=4096)
    return models, engine_kwargs, requests(args.requests, args.image_side or 448)


def add_bounds(rows: list[dict], K: int) -> None:
    """Each speculative row's speedup over its mode's Floor and the bound its per-step split implies."""
    from .speed_measure import bound  # lazy: loads torch

    floors = {r["mode"]: r["tokens_per_s"] for r in rows if r["method"] == "floor"}
    for row in rows:
        if row["mode"] in floors:
            row["x_floor"] = row["tokens_per_s"] / floors[row["mode"]]
        if "verifier_ms_per_step" in row and row["method"] in ("sd", "asymspec"):
            forwards = (
                K + 1 if row["method"] == "asymspec" else K
            )  # sd: K drafts on x_comp, no base pass
            c_d = (
                row["base_pass_ms_per_step"] * (row["method"] == "asymspec")
                + row["draft_ms_per_step"]
            ) / forwards
            row["bound"] = bound(
                row["mean_accepted_length"], c_d, row["verifier_ms_per_step"], forwards
            )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", choices=("tiny", "embedded", "sized"), default="tiny")
    ap.add_argument(
        "--cost-ratio",
        type=float,
        default=1.0,
        help="with --models embedded: the heavy verifier's R",
    )
    ap.add_argument("--modes", default="eager,compiled", help="eager, compiled or both")
    ap.add_argument("--verifier-size", choices=sorted(VERIFIER_SIZES), default="8b")
    ap.add_argument("--drafter-size", choices=sorted(DRAFTER_SIZES), default="2b")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--K", type=int, default=AsymSpecConfig.K)
    ap.add_argument(
        "--image-side",
        type=int,
        default=None,
        help="largest image side (default 128 tiny, 448 sized)",
    )
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--methods", type=parse_methods, default=",".join(METHODS))
    ap.add_argument("--out", default=None, help="write bench_vllm.{md,csv,json} here")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"eager", "compiled"}:
        ap.error(f"--modes takes eager and/or compiled, got {args.modes!r}")

    root = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    rows = []
    with (
        stdout_to_stderr()
    ):  # vLLM's and Gloo's start-up lines: stdout holds the table only
        models, engine_kwargs, reqs = load_models(args, root)
        cfg = AsymSpecConfig(K=args.K, max_new_tokens=args.tokens, ignore_eos=True)
        for mode in modes:
            vl = AsymSpecVL.from_pretrained(
                **{k: str(v) if v else None for k, v in models.items()},
                backend="vllm",
                enforce_eager=mode == "eager",
                **engine_kwargs,
            )
            rows += [{"mode": mode, **bench(vl, m, reqs, cfg)} for m in args.methods]
    add_bounds(rows, args.K)
    columns = [
        "mode",
        "method",
        "requests",
        "tokens",
        "seconds",
        "tokens_per_s",
        "x_floor",
        "bound",
        "acceptance_rate",
        "mean_accepted_length",
        "verifier_ms_per_step",
        "base_pass_ms_per_step",
        "gate_ms_per_step",
        "draft_ms_per_step",
    ]
    what = {
        "sized": f", verifier {args.verifier_size}, drafter {args.drafter_size}",
        "embedded": f", R = {args.cost_ratio:g}",
    }.get(args.models, "")
    title = f"vLLM {args.models} models (K={args.K}, {args.requests} requests x {args.tokens} tokens{what})"
    print(f"# {title}\n\n" + markdown_table(rows, columns))
    if args.out:
        write_table(rows, columns, args.out, "bench_vllm", title)


if __name__ == "__main__":
    main()
