"""Benchmark: the cost per decode step of a cross-family pair's vocabulary map (core/vocab_align.py).

    python -m asymspec_vl.evals.benchmarks.bench_vocab_map [--shapes 1x2,1x4,8x4] [--repeat 20] [--threads 1]
                                                           [--device cuda]

Two pairs: the real sizes (a Qwen3 drafter, Vd = 151,936, with a Llama-3 verifier, Vv = 128,256, sharing
109,566 tokens: random logits and a random map of those sizes) and the embedded toy pair (`embedded-llama`: the
toy drafter's 426 tokens, the toy Llama verifier's, the map built from their tokenizers). Per shape B x K it
prints the median time of: moving K + 1 positions of drafter logits [B, K+1, Vd] to verifier space (the
shared-set gathers), the AsymSpec step across the map (vocab_align.asymspec_step: gate, delta moved, fused and
bonus picks over the shared set) and the same step on one vocabulary of the verifier's size (gate.asymspec_step,
the same-family path); the map's overhead is the difference of the last two. Then the time to build a map
once (build_vocab_map, when a pair loads) between two word-level tokenizers of the real sizes sharing the real
count of strings.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from asymspec_vl.evals.report import markdown_table
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from asymspec_vl.commands import positive_int
from asymspec_vl.core import gate, vocab_align
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.vocab_align import VocabMap
from asymspec_vl.inputs.vocab_map import build_vocab_map
from asymspec_vl.pair.defaults import embedded_models

V_QWEN3, V_LLAMA3, SHARED = (
    151_936,
    128_256,
    109_566,
)  # Timor et al. (2025): Qwen3 <-> Llama-3
COLUMNS = [
    "pair",
    "B",
    "K",
    "move K+1 ms",
    "mapped step ms",
    "one-vocabulary step ms",
    "map overhead ms",
]


def timed(fn, repeat: int, device: str = "cpu", warmup: int = 2) -> float:
    """Median seconds of fn() over `repeat` calls (on CUDA each call waits for its kernels)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def random_map(Vd: int, Vv: int, shared: int, seed: int = 0) -> VocabMap:
    """A map of the real sizes: `shared` verifier ids (increasing) paired with as many drafter ids, at random."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randperm(Vv, generator=g)[:shared].sort().values
    d = torch.randperm(Vd, generator=g)[:shared]
    return VocabMap(d, v, Vd, Vv)


def toy_map() -> VocabMap:
    """The embedded cross-family pair's map (its shipped tokenizers)."""
    from transformers import AutoTokenizer  # lazy: loads transformers

    paths = embedded_models("embedded-llama")
    return build_vocab_map(
        AutoTokenizer.from_pretrained(paths["drafter"]),
        AutoTokenizer.from_pretrained(paths["verifier"]),
    )


def bench(
    name: str,
    vmap: VocabMap,
    B: int,
    K: int,
    repeat: int,
    seed: int = 0,
    device: str = "cpu",
) -> dict:
    g = torch.Generator().manual_seed(seed)
    Vd, Vv = vmap.drafter_size, vmap.verifier_size
    a, b = (torch.randn(B, K + 1, Vd, generator=g) for _ in range(2))  # drafter space
    t = torch.randn(B, K + 1, Vv, generator=g)  # verifier space
    shared = vmap.verifier_ids
    drafts = shared[
        torch.randint(0, shared.numel(), (B, K), generator=g)
    ]  # verifier ids in the shared set
    a_v, b_v = (
        torch.randn(B, K + 1, Vv, generator=g) for _ in range(2)
    )  # the same-family step's inputs
    a, b, t, drafts, a_v, b_v = (x.to(device) for x in (a, b, t, drafts, a_v, b_v))
    cfg = AsymSpecConfig(K=K, beta=1.0)
    vmap.to(device)  # the map's device tensors, built once per pair
    move = timed(lambda: vmap.to_verifier_space(a), repeat, device)
    mapped = timed(
        lambda: vocab_align.asymspec_step(a, b, t, drafts, cfg, vmap), repeat, device
    )
    one = timed(lambda: gate.asymspec_step(a_v, b_v, t, drafts, cfg), repeat, device)
    ms = lambda s: round(1e3 * s, 3)  # noqa: E731
    return {
        "pair": name,
        "B": B,
        "K": K,
        "move K+1 ms": ms(move),
        "mapped step ms": ms(mapped),
        "one-vocabulary step ms": ms(one),
        "map overhead ms": ms(mapped - one),
    }


def build_seconds(drafter_size: int, verifier_size: int, shared: int) -> float:
    """Seconds build_vocab_map takes on two word-level tokenizers of these sizes sharing `shared` strings."""

    def tokenizer(words: list[str]):
        vocab = {w: i for i, w in enumerate(["</s>", *words])}
        return PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token=None)),
            eos_token="</s>",
        )

    common = [f"s{i}" for i in range(shared)]
    d = tokenizer(common + [f"d{i}" for i in range(drafter_size - shared - 1)])
    v = tokenizer(common + [f"v{i}" for i in range(verifier_size - shared - 1)])
    start = time.perf_counter()
    build_vocab_map(d, v)
    return time.perf_counter() - start


def shape_list(text: str) -> list[tuple[int, int]]:
    """argparse type: a comma list of BxK (both integers >= 1) as [(B, K), ...]."""
    try:
        return [
            (positive_int(b), positive_int(k))
            for b, k in (s.split("x") for s in text.split(","))
        ]
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma list of BxK (e.g. 1x2,8x4)"
        ) from None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--shapes",
        type=shape_list,
        default=shape_list("1x2,1x4,8x4"),
        help="comma list of BxK",
    )
    ap.add_argument("--repeat", type=positive_int, default=20)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU's figures")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    maps = {
        f"Qwen3 {V_QWEN3:,} -> Llama-3 {V_LLAMA3:,} ({SHARED:,} shared, random)": random_map(
            V_QWEN3, V_LLAMA3, SHARED
        )
    }
    toy = toy_map()
    maps[
        f"toy embedded-llama ({toy.drafter_size} -> {toy.verifier_size}, {toy.size} shared)"
    ] = toy
    rows = [
        bench(name, vmap, B, K, args.repeat, device=args.device)
        for name, vmap in maps.items()
        for B, K in args.shapes
    ]
    print(markdown_table(rows, COLUMNS))
    where = (
        torch.cuda.get_device_name(args.device)
        if args.device.startswith("cuda")
        else f"CPU, {args.threads} thread(s)"
    )
    print(f"{where}, float32, median of {args.repeat}")
    seconds = build_seconds(V_QWEN3, V_LLAMA3, SHARED)
    print(
        f"building the map once ({V_QWEN3:,} x {V_LLAMA3:,}, {SHARED:,} shared): {seconds:.2f} s"
    )


if __name__ == "__main__":
    main()
