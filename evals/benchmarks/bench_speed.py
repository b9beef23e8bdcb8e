"""Benchmark: speed in the real regime. Floor, SD, drafter alone and AsymSpec tokens/s on held-out toy questions
with the heavy verifier (the embedded verifier's exact logits at R x its cost, asymspec_vl/toy/heavy.py), beside
the measured per-forward costs c_d, c_v, the speedup bound MAL * c_v / ((K + 1) c_d + c_v) and the fraction of it
reached, and beside them c_v(K + 1), the verifier's cost for a step's K + 1 tokens (verify_cost.py), with the bound
MAL * c_v / ((K + 1) c_d + c_v(K + 1)) it gives (terms: speed_measure.py).

    python -m asymspec_vl.evals.benchmarks.bench_speed [--backends hf,vllm] [--ratios 1,4,16] [--batches 1,8]
        [--variants sd-K2,sd-K4,asymspec-K2,asymspec-K4] [--questions 16] [--tokens 48] [--repeats 3]
        [--out runs/bench_speed]

One torch thread (the process's only compute thread: the vLLM CPU engine runs in this process), stop tokens as
in `eval toy` (answers end by themselves; --tokens caps them), decoding speed after the first token in CPU
seconds of this process (wall clock beside it), the fastest of --repeats per batch (the machine may be shared:
the load average and each row's CPU share, CPU over wall seconds, tell how much a wall figure was disturbed).
Prints one table; writes bench_speed.{md,csv,json} (settings, load, versions beside the rows) and bench_speed.png
(speedup over the
Floor against R, bounds at c_v dotted, at c_v(K + 1) dashed) under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import torch
from asymspec_vl.evals.report import markdown_table, write_table
from asymspec_vl.evals.toy.eval import request_of

from asymspec_vl import AsymSpecVL
from asymspec_vl.commands import comma_list, positive_int
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.toy import world
from asymspec_vl.toy.heavy import layer_count, write_heavy_verifier

from .speed_measure import REFERENCES, VARIANTS, decode_batches, summarize
from .verify_cost import forward_seconds

COLUMNS = [
    "backend",
    "R",
    "batch",
    "variant",
    "tokens_per_s",
    "wall_tokens_per_s",
    "speedup",
    "mean_accepted_length",
    "tokens_per_iteration",
    "c_d_ms",
    "c_v_ms",
    "bound",
    "of_bound",
    "c_v_wide_ms",
    "bound_wide",
    "of_bound_wide",
    "cpu_share",
    "load",
]
SPECULATIVE = [k for k in VARIANTS if k not in REFERENCES]


def _ratios(text: str) -> list[float]:
    """argparse type: a comma list of cost ratios toy heavy accepts for the embedded verifier."""

    try:
        return [float(r) for r in comma_list(text) if layer_count(r)]
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--backends",
        type=lambda s: comma_list(s, ("hf", "vllm"), "backend"),
        default=["hf", "vllm"],
    )
    ap.add_argument(
        "--ratios",
        type=_ratios,
        default=[1.0, 4.0, 16.0],
        help="verifier cost ratios R (toy heavy --cost-ratio)",
    )
    ap.add_argument(
        "--batches",
        type=lambda s: [positive_int(x) for x in comma_list(s)],
        default=[1, 8],
        help="requests decoded together",
    )
    ap.add_argument(
        "--variants",
        type=lambda s: comma_list(s, SPECULATIVE, "variant"),
        default=SPECULATIVE,
        help="speculative rows (Floor and drafter alone always run: they give c_v and c_d)",
    )
    ap.add_argument(
        "--questions",
        type=positive_int,
        default=16,
        help="held-out toy questions (read / sum / mult in turn)",
    )
    ap.add_argument(
        "--tokens", type=positive_int, default=48, help="most new tokens per answer"
    )
    ap.add_argument(
        "--repeats",
        type=positive_int,
        default=3,
        help="runs of every batch; the fastest counts",
    )
    ap.add_argument("--out", default="runs/bench_speed")
    return ap.parse_args(argv)


def load_pipeline(backend: str, verifier: Path):

    kwargs = {"dtype": "float32"}
    if backend == "vllm":
        kwargs["max_engines"] = (
            3  # verifier, speculative and drafter engines stay up across repeats
        )
    else:
        kwargs["device"] = "cpu"
    return AsymSpecVL.from_pretrained(
        drafter="embedded", verifier=str(verifier), backend=backend, **kwargs
    )


def measure(args) -> list[dict]:
    """Every (backend, R, batch): the variants' summarized rows, in that order."""

    requests = [request_of(e) for e in world.heldout(args.questions)]
    variants = [VARIANTS[k] for k in (*REFERENCES, *args.variants)]
    widths = sorted({v.K + 1 for v in variants if v.K})
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        for R in args.ratios:
            verifier = write_heavy_verifier(Path(tmp) / f"verifier-R{R:g}", R)
            forwards = {  # the verifier's forward over 1 and K + 1 tokens a row, per batch size
                batch: forward_seconds(verifier, batch, widths)
                for batch in args.batches
            }
            for backend in args.backends:
                vl = load_pipeline(backend, verifier)
                for batch in args.batches:
                    load = os.getloadavg()[0]
                    done = decode_batches(
                        vl, variants, requests, batch, args.tokens, args.repeats
                    )
                    for row in summarize(done, forwards[batch]).values():
                        rows.append(
                            {
                                "backend": backend,
                                "R": R,
                                "batch": batch,
                                **row,
                                "load": max(load, os.getloadavg()[0]),
                            }
                        )
                        print(_line(rows[-1]), flush=True)
                if backend == "vllm":
                    vl.backend.close()
    return rows


def _line(row: dict) -> str:
    bound = (
        f", {row['tokens_per_iteration']:.2f} tokens/iteration, {100 * row['of_bound']:.0f}% of bound "
        f"{row['bound']:.2f} (c_v {row['c_v_ms']:.1f} ms), {100 * row['of_bound_wide']:.0f}% of bound "
        f"{row['bound_wide']:.2f} (c_v(K+1) {row['c_v_wide_ms']:.1f} ms)"
        if "bound" in row
        else ""
    )
    return (
        f"{row['backend']} R={row['R']:g} batch {row['batch']} {row['variant']}: {row['tokens_per_s']:.1f} tok/s, "
        f"{row['speedup']:.2f}x Floor{bound} (cpu share {row['cpu_share']:.2f}, load {row['load']:.1f})"
    )


def plot(rows: list[dict], path: Path) -> Path:
    """Speedup over the Floor against R, one panel per backend and batch; each variant's bound dotted."""
    import matplotlib  # lazy: loads matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: loads matplotlib

    panels = sorted({(r["backend"], r["batch"]) for r in rows})
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels), 3.4), dpi=100, squeeze=False
    )
    for ax, (backend, batch) in zip(axes[0], panels):
        mine = [
            r
            for r in rows
            if (r["backend"], r["batch"]) == (backend, batch) and "bound" in r
        ]
        for n, variant in enumerate(dict.fromkeys(r["variant"] for r in mine)):
            line = sorted(
                (r["R"], r["speedup"], r["bound"], r["bound_wide"])
                for r in mine
                if r["variant"] == variant
            )
            Rs, speedups, bounds, wide = zip(*line)
            ax.plot(Rs, speedups, marker="o", color=f"C{n}", label=variant)
            ax.plot(Rs, bounds, linestyle=":", color=f"C{n}")
            ax.plot(Rs, wide, linestyle="--", linewidth=0.8, color=f"C{n}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("verifier cost ratio R")
        ax.set_ylabel("speedup over the Floor")
        ax.set_title(
            f"{backend}, batch {batch} (dotted: bound at c_v, dashed: at c_v(K+1))",
            fontsize=8,
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def versions() -> dict:
    import transformers  # lazy: loads transformers

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    try:
        import vllm  # lazy: optional: the except branch handles its absence

        found["vllm"] = vllm.__version__
    except ImportError:
        pass
    return found


def main(argv=None) -> None:

    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(1)
    settings = {k: v for k, v in vars(args).items()}
    rows = measure(args)
    title = (
        f"Speed with the heavy verifier ({args.questions} held-out toy questions, at most {args.tokens} tokens, "
        f"1 torch thread, fastest of {args.repeats})"
    )
    print(f"\n# {title}\n\n" + markdown_table(rows, COLUMNS))
    out = Path(args.out)
    paths = write_table(rows, COLUMNS, out, "bench_speed", title)
    report = json.loads(paths["json"].read_text())
    paths["json"].write_text(
        json.dumps({**report, "settings": settings, "versions": versions()}, indent=2)
    )
    print(
        f"\ntable: {paths['md']}, {paths['csv']}, {paths['json']}\nplot: {plot(rows, out / 'bench_speed.png')}"
    )


if __name__ == "__main__":
    main()
