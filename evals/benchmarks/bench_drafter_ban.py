"""Benchmark: the host cost of the cross-family drafter alone's ban on its plain vLLM engine, before and after.

    python -m asymspec_vl.evals.benchmarks.bench_drafter_ban [--batches 16,64] [--steps 8]
                                                             [--pair synthetic|real-llama3] [--cache DIR]

The drafter alone of a cross-family pair may write only the shared set: on Qwen3 (151,936 logit rows) x Llama-3 that
bans ~42k drafter ids per request. Two routes through vLLM's own sampler (v1/sample/sampler.py):
  logit_bias          the old route: a {id: -inf} dict per request; vLLM's LogitBiasLogitsProcessor rebuilds one
                      flat tensor of every row's biases from Python lists at each change of the batch
  allowed_token_ids   the backend's route (drafter_answer.drafter_alone_ids, one list per pair, skip_clone): vLLM
                      fills one bool row of its [max_num_seqs, V] mask when the request joins the batch and copies
                      the mask's first rows to the device at a change of the batch (v1/worker/gpu_input_batch.py)
  none                no ban: the engine's own cost, for reference
Per route and batch B it adds B sampled requests (seeded, 8-token prompts) to one plain engine in this process (a
random Qwen3 with the drafter's 151,936 rows, hidden 64; the real pair's drafter is its tiny Qwen3-VL), steps it
until all finish and prints, in ms of this process's CPU time (time.process_time: what the work costs, not what a
shared machine's load adds to the wall clock): submit (the front end's B add_request calls: the params' copy and
checks), join (the runner's B InputBatch.add_request and the refresh of the first step), batch change
(InputBatch.refresh_metadata, median of the 3 steps at which one early request has left: the logits processors'
update_state and the sampling metadata; it runs only when the batch changed) and the median step. --pair
synthetic (default) bans the 42,370 unshared ids of a random map of the real sizes (bench_vocab_map.random_map) with
a word-level tokenizer of 151,936 tokens; --pair real-llama3 the real Qwen3-VL drafter's and Llama-3 verifier's
(asymspec_vl.toy.real_vocab): what the backend bans.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import torch
from asymspec_vl.evals.benchmarks.bench_vocab_map import (
    SHARED,
    V_LLAMA3,
    V_QWEN3,
    random_map,
)
from asymspec_vl.evals.report import markdown_table
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from asymspec_vl.backends.vllm.drafter_answer import drafter_alone_ids
from asymspec_vl.backends.vllm.engine import configure_environment
from asymspec_vl.pair.model_pair import ModelPair
from asymspec_vl.toy.tiny import write_text_model

COLUMNS = [
    "route",
    "B",
    "banned ids",
    "submit ms",
    "join ms",
    "batch change ms",
    "step ms",
]
LEAVING = (
    3  # requests that finish early, one a step: the batch changes by one each time
)


def synthetic_model(out: Path) -> Path:
    """A random tiny Qwen3 with 151,936 logit rows and a word-level tokenizer of as many tokens."""
    words = ["<|im_end|>", "<|endoftext|>"] + [f"w{i}" for i in range(V_QWEN3 - 2)]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(
            models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=None)
        ),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    return write_text_model(out, tok)


class Ban(NamedTuple):
    allowed: list[int]  # drafter ids the drafter alone may write (the backend's list)
    banned: list[int]  # the others (the old route's logit_bias keys)


def ban_of(vmap, banned_v: list[int]) -> Ban:
    """The backend's rule (drafter_answer.drafter_alone_ids): outside the shared set, or a banned token of the pair."""
    allowed = drafter_alone_ids(vmap, banned_v).allowed
    keep = set(allowed)
    return Ban(allowed, [i for i in range(vmap.drafter_size) if i not in keep])


def synthetic_ban(seed: int) -> Ban:
    """A random map of the real sizes (Qwen3 151,936 x Llama-3 128,256, 109,566 shared): 42,370 banned ids."""
    return ban_of(random_map(V_QWEN3, V_LLAMA3, SHARED, seed), [])


def real_llama3(cache: Path) -> tuple[Path, Ban]:
    """The real-llama3 pair's Qwen3 drafter folder and its drafter alone's ban (the pair's map and banned ids)."""
    from asymspec_vl.toy import real_vocab  # lazy: reads the real tokenizers' packages

    drafter_family, verifier_family = real_vocab.REAL_PAIRS["real-llama3"]
    drafter = real_vocab.real_model_dir(drafter_family, "drafter", cache)
    verifier = real_vocab.real_model_dir(verifier_family, "verifier", cache)
    pair = ModelPair.load(str(drafter), str(verifier))
    return drafter, ban_of(pair.vmap, pair.banned_ids())


def route_params(route: str, ban: Ban, seed: int, max_tokens: int):
    """One request's SamplingParams on `route` (logit_bias: as the old backend built them, a dict per request;
    allowed_token_ids: as the backend builds them now, the pair's one list by reference)."""
    from vllm import SamplingParams  # lazy: loads vLLM

    kw = dict(
        max_tokens=max_tokens,
        ignore_eos=True,
        temperature=1.0,
        seed=seed,
        detokenize=False,
    )
    if route == "logit_bias":
        return SamplingParams(**kw, logit_bias={i: float("-inf") for i in ban.banned})
    if route == "allowed_token_ids":
        return SamplingParams(**kw, allowed_token_ids=ban.allowed, skip_clone=True)
    return SamplingParams(**kw)


class HostClock:
    """Times vLLM's per-batch host work in this process (the CPU build's engine core runs here): InputBatch's
    add_request (a request joins: the allowed route fills its mask row) and refresh_metadata (the batch changed: the
    logits processors' update_state, the logit_bias route's rebuild among them, and the sampling metadata, the
    allowed route's mask rows copied to the device)."""

    def __init__(self):
        from vllm.v1.worker.gpu_input_batch import InputBatch  # lazy: loads vLLM

        self.cls, self.log = InputBatch, []
        self.originals = {
            name: getattr(InputBatch, name)
            for name in ("add_request", "refresh_metadata")
        }
        for name, original in self.originals.items():
            setattr(self.cls, name, self._timed(name, original))

    def _timed(self, name, original):
        def timed(batch, *args, **kwargs):
            start = time.process_time()
            out = original(batch, *args, **kwargs)
            self.log.append((name, batch.num_reqs, time.process_time() - start))
            return out

        return timed

    def close(self) -> None:
        for name, original in self.originals.items():
            setattr(self.cls, name, original)


def run(llm, clock: HostClock, route: str, B: int, steps: int, ban: Ban) -> dict:
    """Add B requests (LEAVING of them finish one a step early), step until all finish; the timings of COLUMNS:
    submit (the B add_request calls of the front end), join (the runner's B add_request and its refresh at the
    first step), batch change (the median refresh as one request leaves) and the median step."""
    engine = llm.llm_engine
    g = torch.Generator().manual_seed(B)
    prompts = torch.randint(2, 1000, (B, 8), generator=g).tolist()
    start = time.process_time()
    for i, ids in enumerate(prompts):
        max_tokens = 2 + i if i < LEAVING else steps
        engine.add_request(
            f"{route}-{B}-{i}",
            {"prompt_token_ids": ids},
            route_params(route, ban, seed=i, max_tokens=max_tokens),
        )
    submit = time.process_time() - start
    clock.log.clear()
    times = []
    while engine.has_unfinished_requests():
        t0 = time.process_time()
        engine.step()
        times.append(time.process_time() - t0)
    added = [t for name, _, t in clock.log if name == "add_request"]
    refreshes = [(n, t) for name, n, t in clock.log if name == "refresh_metadata"]
    # refresh_metadata runs every step; the first holds the B new rows, and one runs as each early request leaves
    leaving = [t for (n, t), (m, _) in zip(refreshes[1:], refreshes) if n < m]
    assert refreshes[0][0] == B and len(leaving) == LEAVING, refreshes
    ms = lambda s: round(1e3 * s, 1)  # noqa: E731
    return {
        "route": route,
        "B": B,
        "banned ids": len(ban.banned) if route != "none" else 0,
        "submit ms": ms(submit),
        "join ms": ms(sum(added) + refreshes[0][1]),
        "batch change ms": ms(statistics.median(leaving)),
        "step ms": ms(statistics.median(times)),
    }


def positive_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--batches", type=positive_list, default=[16, 64], help="comma list of B"
    )
    ap.add_argument(
        "--steps", type=int, default=8, help=f"tokens per request (>= {LEAVING + 3})"
    )
    ap.add_argument("--pair", choices=["synthetic", "real-llama3"], default="synthetic")
    ap.add_argument(
        "--routes",
        default="logit_bias,allowed_token_ids,none",
        help="comma list of routes",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cache",
        type=Path,
        help="folder for the real pair's tokenizers and models (default: a temporary one)",
    )
    args = ap.parse_args(argv)
    if args.steps < LEAVING + 3:
        ap.error(f"--steps must be at least {LEAVING + 3}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # the engine core in this process (the CPU build's default), so that HostClock sees its runner
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM  # lazy: loads vLLM (after the arguments are read)

    configure_environment()  # the asymspec patches and the CPU build's settings, as the backend runs its engines
    with tempfile.TemporaryDirectory() as tmp:
        if args.pair == "synthetic":
            folder, ban = (
                synthetic_model(Path(tmp) / "drafter"),
                synthetic_ban(args.seed),
            )
        else:
            folder, ban = real_llama3(args.cache or Path(tmp))
        llm = LLM(
            model=str(folder),
            max_num_seqs=max(args.batches),
            max_model_len=64,
            enforce_eager=True,
            seed=args.seed,
        )
        clock = HostClock()
        rows = [
            run(llm, clock, route, B, args.steps, ban)
            for B in args.batches
            for route in args.routes.split(",")
        ]
    print(markdown_table(rows, COLUMNS))
    print(
        f"{args.pair} pair: {V_QWEN3:,} logit rows, {len(ban.banned):,} banned drafter ids; vLLM plain engine, "
        f"{os.cpu_count()} CPU(s), {args.steps} tokens a request"
    )


if __name__ == "__main__":
    main()
