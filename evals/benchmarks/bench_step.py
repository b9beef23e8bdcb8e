"""Benchmark: AsymSpec step time split by pass, and step time against generated length, cached vs from scratch.

    python -m asymspec_vl.evals.benchmarks.bench_step [--drafter PATH --verifier PATH] [--tokens 384] [--K 2]

Prints the mean time per speculation step of each part of Algorithm 1 (the drafter's K autoregressive
steps on x_full, the base pass of the drafter's weights on x_comp, the verifier pass, the gate/fusion math),
then the step time in buckets of generated length for the cached loop (O(K) per step: flat) and for the
from-scratch loop of reference.py (re-reads the whole prompt every forward: grows). Defaults to tiny random
models written to a temporary folder; stop tokens are disabled so every run reaches --tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections import defaultdict

import torch
from PIL import Image

from asymspec_vl import AsymSpecConfig, AsymSpecVL, Request
from asymspec_vl.backends.hf.reference import reference_asymspec
from asymspec_vl.commands import positive_int
from asymspec_vl.core import loop, methods
from asymspec_vl.inputs.prompts import encode_request
from asymspec_vl.toy.tiny import write_tiny_models


class Timed:
    """Wraps a LogitSource and adds the seconds of its forwards to totals[name]."""

    def __init__(self, source, name: str, totals: dict):
        self.source, self.name, self.totals = source, name, totals

    def prefill(self):
        self.source.prefill()

    def pending(self, y):
        return self.source.pending(y)

    def commit(self, y):
        self.source.commit(y)

    def forward(self, tokens):
        t0 = time.perf_counter()
        out = self.source.forward(tokens)
        self.totals[self.name] += time.perf_counter() - t0
        return out


def buckets(stamps: list[tuple[int, float]], width: int) -> dict[int, float]:
    """Mean step time (ms) per bucket of generated length from (length, time) stamps."""
    per = defaultdict(list)
    for (_, t0), (n1, t1) in zip(stamps, stamps[1:]):
        per[n1 // width * width].append((t1 - t0) * 1e3)
    return {k: sum(v) / len(v) for k, v in sorted(per.items())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--drafter")
    ap.add_argument("--verifier")
    ap.add_argument("--tokens", type=positive_int, default=384)
    ap.add_argument("--K", type=positive_int, default=AsymSpecConfig.K)
    ap.add_argument("--bucket", type=positive_int, default=64)
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    if not args.drafter:
        paths = write_tiny_models(tempfile.mkdtemp(prefix="bench-step-"))
        args.drafter, args.verifier = str(paths["vl_drafter"]), str(paths["verifier"])
    vl = AsymSpecVL.from_pretrained(drafter=args.drafter, verifier=args.verifier)

    image = Image.new("RGB", (128, 96), (40, 120, 200))
    req = Request(
        image,
        "What is the value of the tallest bar? Explain step by step.",
        caption="A bar chart with four bars. " * 8,
        ocr="2019 2020 2021 2022 12 30 21 17",
    )
    cfg = AsymSpecConfig(K=args.K, max_new_tokens=args.tokens, ignore_eos=True)
    be, pair = vl.backend, vl.pair
    enc = encode_request(req, pair.processor, pair.tokenizer)
    banned = pair.banned_mask(be.device)

    totals: dict = defaultdict(float)
    names = {
        methods.DRAFTER_FULL: "drafter x_full (K steps)",
        methods.DRAFTER_COMP: "base pass (drafter on x_comp)",
        methods.VERIFIER: "verifier pass",
    }
    asymspec = methods.METHODS["asymspec"]
    plan = loop.plan(
        asymspec,
        cfg,
        lambda s: Timed(
            be._source(be.models[s.model], [enc.view(s.view)]), names[s], totals
        ),
        banned,
    )

    def timed_decide(cfg, logits, drafts, banned):
        t0 = time.perf_counter()
        out = asymspec.decide(cfg, logits, drafts, banned)
        totals["gate + fusion"] += time.perf_counter() - t0
        return out

    plan.method = dataclasses.replace(asymspec, decide=timed_decide)
    stamps = [(0, time.perf_counter())]
    out = loop.run(
        plan,
        1,
        [args.tokens],
        set(),
        on_step=lambda rows: stamps.append(
            (len(rows[0].token_ids), time.perf_counter())
        ),
    )[0]
    steps = out.stats.steps
    print(
        f"prompt tokens: x_full {len(enc.full.ids)}, x_comp {len(enc.comp.ids)}; K={args.K}; "
        f"{out.stats.emitted} tokens in {steps} steps (acceptance {out.stats.acceptance_rate:.2f}, "
        f"MAL {out.stats.mean_accepted_length:.2f})"
    )
    print("\nper-step time split (cached loop):")
    step_ms = sum(totals.values()) / steps * 1e3
    for name, sec in totals.items():
        print(
            f"  {name:32s} {sec / steps * 1e3:8.3f} ms  ({100 * sec / sum(totals.values()):5.1f}%)"
        )
    print(f"  {'total (instrumented)':32s} {step_ms:8.3f} ms")

    cached = buckets(stamps, args.bucket)
    naive = {}
    if not args.skip_naive:
        nstamps = [(0, time.perf_counter())]
        reference_asymspec(
            be.drafter,
            be.verifier,
            enc.full,
            enc.comp,
            cfg,
            banned,
            set(),
            args.tokens,
            on_step=lambda y: nstamps.append((len(y), time.perf_counter())),
        )
        naive = buckets(nstamps, args.bucket)
    print(f"\nstep time (ms) by generated length (buckets of {args.bucket} tokens):")
    print(f"  {'length':>8s} {'cached':>10s} {'naive':>10s}")
    for k, v in cached.items():
        n = f"{naive[k]:10.2f}" if k in naive else f"{'-':>10s}"
        print(f"  {k:8d} {v:10.2f} {n}")


if __name__ == "__main__":
    main()
