"""Seeded random workloads of the differential stress test: one engine configuration and the requests it serves.

A workload is plain data (JSON round trip), so every mismatch prints the workload that reproduces it:
  EngineCase  what one asymspec engine is started with: block size, K (num_speculative_tokens), max_num_seqs,
              the step's token budget (small: prompts prefill in chunks), prefix caching, a KV cache too small
              for the batch (vLLM preempts and recomputes), a small x_full pool (admission control waits),
              tensor parallelism and worker processes, and compilation (vLLM's CPU default, torch.compile traced
              once: on the CPU build its first trace is the whole token budget, as a GPU's profile run), and
              the pair it loads: "same" (the tiny same-family models), "cross" (the embedded cross-family
              pair `embedded-llama`, two vocabularies) or a real-shape pair ("real-qwen3", "real-llama3",
              "real-tekken", "real-mistral-sp": real tokenizers and vocabulary rows; see hf_side.py)
  RowSpec     one request: its method on that one engine (asymspec, sd, scd, floor, or plain speculative
              decoding without extra_args), its own K (at most the engine's) and config, its answer budget and
              stop tokens, an image or text-only request, and the engine step it arrives at (rows finish and
              their batch rows are reused by later arrivals while others are running); asymspec, sd, scd and
              floor rows may sample with a seed (temperature 0.8, and top-k / top-p / min-p drawn apart)
GPU-shaped engines (`draw(..., gpu_shaped=True)`, drawn from a second generator so that a seed's other draws stay
as they were): compiled, budgets from 16 to 2048 with max_num_seqs above and below them, seeded sampled rows
beside greedy ones in chunked prefills, prefix caching on and off, block size 16 (FlashInfer's and FlashAttention's
usual page size), TP=2.
The drafter alone (`draw(..., drafter=True)`, mode "drafter"; drawn from a generator of its own, after the other rows,
which stay as they were): half the cases add 2 to max_num_seqs + 2 drafter rows, image or text-only, greedy or seeded
sampled (top-k / top-p / min-p as above), each asking for its logprobs; the case runs them after the speculative
engine's rows on a plain drafter engine of the same knobs (drafter_run.py).
Cross-family cases (`with_pair(w, "cross")`) keep the draw; the rows the vLLM engine refuses across a vocabulary
map (plain speculative ones, sampled ones of a method the engine does not sample there: unserved_across_map) are
skipped when the case runs, and counted by reason; the sampled rows of the methods it samples there run.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from asymspec_vl import AsymSpecConfig, Request
from asymspec_vl.core.limits import LIMITS

# The CPU build's attention (vllm/v1/attention/backends/cpu_attn.py) takes any block size its kernel divides:
# multiples of 16 ("vec16"), of 32 for the "vec" / AMX kernels; 128 is the CPU platform's default.
BLOCK_SIZES = (16, 32, 48, 64, 96, 128, 256)
ENGINE_KS = (2, 3, 4, 5)
MAX_NUM_SEQS = (2, 3, 4, 6, 8)
TOKEN_BUDGETS = (
    None,
    24,
    32,
    48,
    64,
    96,
)  # max_num_batched_tokens; None: the engine's default (no chunking)
GPU_BUDGETS = (16, 32, 64, 128, 512, 2048)  # GPU-shaped engines' max_num_batched_tokens
GPU_MAX_NUM_SEQS = (2, 4, 8, 16)
MODES = (
    "asymspec",
    "sd",
    "scd",
    "floor",
    "plain",
)  # plain: no extra_args (ordinary lossless SD)
MODE_WEIGHTS = (4, 2, 2, 1, 1)
# a GPU-shaped draw makes 40 % of these modes' rows sample (_sampled)
SAMPLED_MODES = ("asymspec", "sd", "scd", "floor")
DRAFTER = "drafter"  # the drafter alone: its own plain engine, not a mode of the speculative one (drafter_rows)
DRAFTER_LOGPROBS = (0, 2, 5)  # the cfg.logprobs a drafter row asks for
QUESTIONS = (
    "What is the value of the largest bar?",
    "How many circles are shown in the figure?",
    "Which color is the triangle on the left?",
    "What is the sum of the two numbers in the picture?",
    "Find the measure of angle A. Choices: (A) 30 (B) 45 (C) 60 (D) 90",
    "What is the title of the chart?",
    "Is the line increasing? Answer yes or no.",
    "What percent of the area is shaded?",
)
WORDS = (
    "the chart shows bars of red green blue value total sum angle circle square line table year percent "
    "left right top bottom label axis number digit first second third"
).split()


@dataclass(frozen=True)
class EngineCase:
    block_size: int = 16
    K: int = (
        LIMITS.speculative_tokens
    )  # num_speculative_tokens: the most drafts a request may ask for
    max_num_seqs: int = 4
    max_num_batched_tokens: int | None = None
    prefix_caching: bool = True
    preempt: bool = False  # a KV cache of about half the running rows' needs (num_gpu_blocks_override)
    small_pool: bool = (
        False  # an x_full pool of about 1.5 requests (ASYMSPEC_FULL_VIEW_TOKENS)
    )
    tp: int = 1
    processes: bool = False  # VLLM_ENABLE_V1_MULTIPROCESSING=1 (engine core and workers in their own processes)
    compiled: bool = False  # enforce_eager=False: vLLM's CPU compilation, first traced at the whole budget
    # "same": the tiny same-family models; "cross": the embedded cross-family pair; hf_side.REAL: a real-shape pair
    pair: str = "same"

    @property
    def in_subprocess(self) -> bool:
        """Such engines run in a fresh interpreter: vLLM reads the multiprocessing switch once per process."""
        return self.tp > 1 or self.processes


@dataclass(frozen=True)
class RowSpec:
    mode: str
    K: int
    max_new: int
    request_seed: int  # the request's text and image (equal seeds: equal prompts, prefix-cache hits)
    image: bool = True
    arrival: int = 0  # the engine step at which the request is added
    config: dict = field(
        default_factory=dict
    )  # further AsymSpecConfig fields (gamma, beta, gate, bonus)
    stop_token_ids: tuple[int, ...] | None = None  # None: the verifier's EOS tokens

    def cfg(self) -> AsymSpecConfig:
        return AsymSpecConfig(
            K=self.K,
            max_new_tokens=self.max_new,
            stop_token_ids=self.stop_token_ids,
            **self.config,
        )


@dataclass(frozen=True)
class Workload:
    seed: int
    engine: EngineCase
    rows: tuple[RowSpec, ...]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Workload:
        d = json.loads(text)
        rows = tuple(
            RowSpec(
                **{
                    **r,
                    "stop_token_ids": tuple(r["stop_token_ids"])
                    if r["stop_token_ids"] is not None
                    else None,
                }
            )
            for r in d["rows"]
        )
        return cls(d["seed"], EngineCase(**d["engine"]), rows)

    def axes(self) -> set[str]:
        """The stress axes this workload exercises (for coverage checks of a fixed seed set)."""
        e = self.engine
        out = {
            f"block_size={e.block_size}",
            f"tp={e.tp}",
            f"prefix_caching={e.prefix_caching}",
            f"pair={e.pair}",
        }
        out |= {f"mode={r.mode}" for r in self.rows} | {
            "image" if r.image else "text" for r in self.rows
        }
        if any(r.K < e.K for r in self.rows if r.mode in ("asymspec", "sd", "scd")):
            out.add("K_below_engine")
        if len(self.rows) > e.max_num_seqs:
            out.add("rows_reused")
        if len({r.mode for r in self.rows}) >= 3:
            out.add("mixed_methods")
        out |= {
            name
            for name, on in (
                ("chunked_prefill", e.max_num_batched_tokens is not None),
                ("preemption", e.preempt),
                ("small_pool", e.small_pool),
                ("processes", e.processes or e.tp > 1),
                ("compiled", e.compiled),
                ("sampled", any("temperature" in r.config for r in self.rows)),
            )
            if on
        }
        return out


def draw(
    seed: int,
    max_rows: int = 16,
    tp: bool = True,
    engine: EngineCase | None = None,
    max_new: int = 40,
    gpu_shaped: bool = False,
    drafter: bool = False,
) -> Workload:
    """A random workload; `tp` False keeps it in this process (TP=1, no worker processes); `engine` fixes the
    engine (the rows are still drawn); answers of at most `max_new` tokens; `gpu_shaped`: the GPU's conditions
    (see the module docstring) drawn on top, from their own generator; `drafter`: the drafter alone's rows too
    (drafter_rows)."""
    rng = random.Random(seed)
    tp2 = tp and rng.random() < 0.15
    drawn = EngineCase(
        block_size=rng.choice(BLOCK_SIZES),
        K=rng.choice(ENGINE_KS),
        max_num_seqs=rng.choice(MAX_NUM_SEQS),
        max_num_batched_tokens=rng.choice(TOKEN_BUDGETS),
        prefix_caching=rng.random() < 0.6,
        preempt=rng.random() < 0.3,
        small_pool=rng.random() < 0.2,
        tp=2 if tp2 else 1,
        processes=tp2 or (tp and rng.random() < 0.1),
    )
    engine = engine or drawn
    n = rng.randint(
        engine.max_num_seqs + 1,
        max(engine.max_num_seqs + 2, min(max_rows, 3 * engine.max_num_seqs)),
    )
    rows: list[RowSpec] = []
    for _ in range(n):
        mode = rng.choices(MODES, MODE_WEIGHTS)[0]
        reuse = (
            rows and rng.random() < 0.25
        )  # the prompt of an earlier row: a prefix-cache hit
        rows.append(
            RowSpec(
                mode=mode,
                K=rng.randint(1, engine.K),
                max_new=rng.choice((1, 2, 3))
                if rng.random() < 0.15
                else rng.randint(4, max_new),
                request_seed=rng.choice(rows).request_seed
                if reuse
                else rng.randrange(10**6),
                image=rng.random() < 0.7,
                arrival=0 if rng.random() < 0.5 else rng.randint(1, 16),
                config=_config(rng) if mode == "asymspec" else {},
                stop_token_ids=None
                if rng.random() < 0.7
                else tuple(sorted(rng.sample(range(30, 400), 3))),
            )
        )
    workload = Workload(seed, engine, tuple(rows))
    if gpu_shaped:
        workload = _gpu_shaped(workload, tp, fixed_engine=engine is not drawn)
    return drafter_rows(workload, max_new) if drafter else workload


def drafter_rows(w: Workload, max_new: int = 40) -> Workload:
    """w with, in half the seeds, 2 to max_num_seqs + 2 drafter rows appended (a batch that reuses its rows): image in
    80 %, a quarter on an earlier row's prompt (a prefix-cache hit), 40 % seeded sampled (the filters of _sampled),
    each asking for cfg.logprobs. Drawn from their own generator: w's rows stay as they were."""
    rng = random.Random(f"drafter-{w.seed}")
    if rng.random() >= 0.5:
        return w
    rows = list(w.rows)
    for _ in range(rng.randint(2, w.engine.max_num_seqs + 2)):
        reuse = rows and rng.random() < 0.25
        config = {"logprobs": rng.choice(DRAFTER_LOGPROBS)}
        if rng.random() < 0.4:
            config = _filtered(
                {**config, "temperature": 0.8, "seed": rng.randrange(10**6)}, rng
            )
        rows.append(
            RowSpec(
                mode=DRAFTER,
                K=w.engine.K,
                max_new=rng.randint(1, max_new),
                request_seed=rng.choice(rows).request_seed
                if reuse
                else rng.randrange(10**6),
                image=rng.random() < 0.8,
                arrival=0 if rng.random() < 0.5 else rng.randint(1, 16),
                config=config,
                stop_token_ids=None
                if rng.random() < 0.7
                else tuple(sorted(rng.sample(range(30, 400), 3))),
            )
        )
    return dataclasses.replace(w, rows=tuple(rows))


def _gpu_shaped(w: Workload, tp: bool, fixed_engine: bool) -> Workload:
    """The GPU's conditions on w: a compiled engine at a GPU budget (unless the engine was fixed) and seeded
    sampled speculative rows; drawn from a generator of their own."""
    rng = random.Random(f"gpu-shaped-{w.seed}")
    engine = w.engine
    if not fixed_engine:
        engine = dataclasses.replace(
            engine,
            compiled=rng.random() < 0.7,
            block_size=rng.choice((16, 16, 32, 128)),
            max_num_batched_tokens=rng.choice(GPU_BUDGETS),
            max_num_seqs=rng.choice(GPU_MAX_NUM_SEQS),
            prefix_caching=rng.random() < 0.5,
        )
    filters = random.Random(f"gpu-shaped-filters-{w.seed}")
    rows = tuple(_sampled(r, rng, filters) for r in w.rows)
    return Workload(w.seed, engine, rows[: 3 * engine.max_num_seqs])


def with_pair(w: Workload, pair: str) -> Workload:
    """w on the pair `pair` (one of hf_side.PAIRS), its draws unchanged."""
    return dataclasses.replace(w, engine=dataclasses.replace(w.engine, pair=pair))


def _sampled(r: RowSpec, rng: random.Random, filters: random.Random) -> RowSpec:
    """r as a GPU-shaped draw leaves it: 40 % of SAMPLED_MODES' rows sample, seeded, at temperature 0.8, each of
    top-k, top-p and min-p on in 30 % of them. Floor rows and the filters were added later: they draw from
    `filters`, so that rng's draws, and the older seeds' workloads, stay as they were."""
    if r.mode not in SAMPLED_MODES:
        return r
    own = filters if r.mode == "floor" else rng
    if own.random() >= 0.4:
        return r
    config = {**r.config, "temperature": 0.8, "seed": own.randrange(10**6)}
    return dataclasses.replace(r, config=_filtered(config, filters))


def _filtered(config: dict, filters: random.Random) -> dict:
    """config with each of top-k, top-p and min-p on in 30 % of the draws of `filters`."""
    config = dict(config)
    if filters.random() < 0.3:
        config["top_k"] = filters.choice((5, 20, 60))
    if filters.random() < 0.3:
        config["top_p"] = filters.choice((0.7, 0.9))
    if filters.random() < 0.3:
        config["min_p"] = filters.choice((0.05, 0.2))
    return config


def unserved_across_map(row: RowSpec) -> str | None:
    """Why the vLLM engine refuses this row for a cross-family pair (None: it serves it), the reason a case counts
    it under. "plain": a plain speculative request (no extra_args) is refused by the engine
    (engine_map.cross_family_refusal): it carries no x_comp in the drafter's ids, and vLLM's own draft-model
    verification compares draft and target ids of one vocabulary, so there is nothing to compare it against.
    Every method, sampled or not, is served across a map."""
    return "plain" if row.mode == "plain" else None


def _config(rng: random.Random) -> dict:
    out = {}
    if rng.random() < 0.4:
        out["gamma"] = rng.choice((0.2, 0.8, 1.0))
    if rng.random() < 0.3:
        out["bonus"] = "fused"
    if rng.random() < 0.3:
        out["gate"] = rng.choice(("lambda", "fixed", "kl"))
    if rng.random() < 0.3:
        out["beta"] = rng.choice((0.5, 2.0))
    return out


def make_request(row: RowSpec) -> Request:
    """The request of a row: an image with a caption and OCR text, or a text-only AsymSpec request."""
    rs = np.random.RandomState(row.request_seed % (2**32))
    question = QUESTIONS[row.request_seed % len(QUESTIONS)]
    if not row.image:
        words = lambda n: " ".join(WORDS[i] for i in rs.randint(0, len(WORDS), n))  # noqa: E731
        return Request(
            question=question,
            full_context=words(int(rs.randint(5, 120))),
            compressed_context=words(int(rs.randint(0, 30))),
        )
    h, w = rs.randint(32, 161, 2)
    image = Image.fromarray((rs.rand(h, w, 3) * 255).astype("uint8"))
    caption = " ".join(["a figure with shapes and a bar chart"] * int(rs.randint(1, 5)))
    ocr = " ".join(str(x) for x in rs.randint(0, 100, int(rs.randint(0, 9))))
    return Request(image, question, caption=caption, ocr=ocr)
