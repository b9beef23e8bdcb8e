"""Speed measurement for bench_speed: decode the toy questions by each variant, keep the fastest of the repeats per
batch, derive the per-forward costs c_d, c_v and the speedup bound of a speculative method.

Terms (one configuration: backend, verifier cost ratio R, batch size):
  decoding   what follows each row's first step: every batch is decoded twice, to its answers and to one token
             per row, and the difference of the two is the decoding (prompt encoding, prefill and the first step
             cancel out, on both backends alike). The 1-token run still runs its whole first step (K drafts and the
             verification: accepted + 1 tokens generated, all but one cut by the budget), so the decoded tokens are
             the answer's less the tokens that first step generated, not less the one it kept
  time       CPU seconds of this process (one torch thread; vLLM's CPU engine runs in this process): on an idle
             core it equals wall time, on a shared one it leaves out the time other processes held the core;
             wall-clock figures are kept beside it
  iteration  one pass of the decoding loop over the batch (a step of every active row): a batch's iterations are
             the most steps any of its rows took (its rows wait for the slowest)
  c_v        seconds per iteration of the Floor (one verifier forward on x_comp, as the backend runs it)
  c_d        seconds per iteration of the drafter alone (one drafter forward)
  n_d        drafter forwards per step of a method: K drafting forwards (K + 1 when it also reads d_K) plus one
             per scoring pass of the drafter (AsymSpec's base pass on x_comp): K + 1 for AsymSpec, K for SD
  bound      speedup over the Floor if a step cost exactly n_d * c_d + c_v:
             gain * c_v / (n_d * c_d + c_v), gain = tokens per iteration over the Floor's (MAL at batch 1);
             it prices the verification of K drafts at c_v, the cost of the verifier's forward over one token
  c_v(K+1)   the Floor's c_v with its one-token forward replaced by the verifier's forward over K + 1 tokens a
             row (verify_cost.py measures both forwards): what a step's verification costs where the forward's
             work grows with its tokens (a CPU; a GPU at large batch)
  bound_wide the bound with c_v(K + 1) in the step's cost: gain * c_v / (n_d * c_d + c_v(K + 1))
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from asymspec_vl import AsymSpecConfig
from asymspec_vl.core.methods import METHODS

from .verify_cost import wide_verifier_cost

BASE = AsymSpecConfig(
    max_new_tokens=48
)  # the toy eval's settings (evals/toy/eval.py BASE)


@dataclass(frozen=True)
class Variant:
    """One row of the table: a method at a K."""

    key: str
    method: str
    K: int = 0

    def config(self, max_new_tokens: int) -> AsymSpecConfig:
        return BASE.replace(K=max(self.K, 1), max_new_tokens=max_new_tokens)

    @property
    def drafter_forwards(self) -> int:
        """n_d: drafter forwards per step (0 for a method without drafts)."""
        m = METHODS[self.method]
        if not m.speculative:
            return 0
        scoring = sum(s.model != "verifier" for s in m.scoring)
        return self.K + int(m.drafts_last(self.config(1))) + scoring


VARIANTS = {
    v.key: v
    for v in (
        Variant("floor", "floor"),
        Variant("drafter", "drafter"),
        Variant("sd-K2", "sd", 2),
        Variant("sd-K4", "sd", 4),
        Variant("asymspec-K2", "asymspec", 2),
        Variant("asymspec-K4", "asymspec", 4),
    )
}
REFERENCES = ("floor", "drafter")  # always measured: they give c_v and c_d


@dataclass
class Timing:
    """The fastest of the repeats of one call, by each clock, and what the call decoded."""

    cpu_s: float = float("inf")
    wall_s: float = float("inf")
    emitted: int = 0
    generated: list = field(
        default_factory=list
    )  # [rows]: tokens the row's steps generated (accepted + 1 a step), before the stop / budget cut
    emitted_rows: list = field(default_factory=list)  # [rows]: tokens kept
    steps: int = 0  # summed over the rows
    iterations: int = 0  # the most steps of any row
    token_ids: list = field(default_factory=list)

    def add(self, results, cpu_s: float, wall_s: float) -> None:
        ids = [r.token_ids for r in results]
        if self.token_ids and ids != self.token_ids:
            raise RuntimeError(
                "a repeat decoded other tokens than the first: the decoding is not deterministic"
            )
        self.cpu_s, self.wall_s, self.token_ids = (
            min(self.cpu_s, cpu_s),
            min(self.wall_s, wall_s),
            ids,
        )
        self.emitted = sum(r.stats.emitted for r in results)
        self.emitted_rows = [r.stats.emitted for r in results]
        self.generated = [r.stats.accepted + r.stats.steps for r in results]
        self.steps = sum(r.stats.steps for r in results)
        self.iterations = max(r.stats.steps for r in results)


@dataclass
class Batch:
    """One batch of requests under one variant: decoded to its answers (`full`) and to one token per row."""

    full: Timing = field(default_factory=Timing)
    first: Timing = field(default_factory=Timing)

    @property
    def decoded_tokens(self) -> int:
        """Tokens of the answers after each row's first step: what the full run kept less what the 1-token run's
        first step generated (the same step of the same deterministic decoding; an answer that ends inside it
        decodes nothing after it)."""
        return sum(
            kept - min(first, kept)
            for kept, first in zip(self.full.emitted_rows, self.first.generated)
        )


def timed(
    timing: Timing, vl, requests: list, variant: Variant, max_new_tokens: int
) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    results = vl.generate_batch(
        requests, variant.method, variant.config(max_new_tokens), on_error="raise"
    )
    timing.add(results, time.process_time() - cpu, time.perf_counter() - wall)


def decode_batches(
    vl,
    variants: list[Variant],
    requests: list,
    batch: int,
    max_new_tokens: int,
    repeats: int,
) -> dict[str, list[Batch]]:
    """Every variant on every batch, `repeats` times, repeats outermost (a burst of load on the machine hits
    one repeat of every variant, not every repeat of one); each variant is run once untimed first (engines start)."""
    chunks = [requests[i : i + batch] for i in range(0, len(requests), batch)]
    for v in variants:
        vl.generate_batch(chunks[0], v.method, v.config(2), on_error="raise")
    best = {v.key: [Batch() for _ in chunks] for v in variants}
    for _ in range(repeats):
        for v in variants:
            for kept, chunk in zip(best[v.key], chunks):
                timed(kept.full, vl, chunk, v, max_new_tokens)
                timed(kept.first, vl, chunk, v, 1)
    return best


def summarize(
    batches: dict[str, list[Batch]], forward_s: dict[int, float] | None = None
) -> dict[str, dict]:
    """Per variant: decoding tokens/s (CPU and wall clock), MAL, and against the Floor and the drafter alone:
    speedup, c_d, c_v, the bound and the fraction of it reached; with forward_s (verify_cost.forward_seconds:
    {tokens a row: seconds of the verifier's forward}) also c_v(K + 1) and the bound with it."""
    rows = {}
    for key, parts in batches.items():

        def decoded(field_name: str, parts: list[Batch] = parts) -> float:
            return sum(
                getattr(b.full, field_name) - getattr(b.first, field_name)
                for b in parts
            )

        tokens, iterations = sum(b.decoded_tokens for b in parts), decoded("iterations")
        rows[key] = {
            "variant": key,
            "tokens": tokens,
            "tokens_per_s": tokens / decoded("cpu_s"),
            "wall_tokens_per_s": tokens / decoded("wall_s"),
            "mean_accepted_length": sum(b.full.emitted for b in parts)
            / sum(b.full.steps for b in parts),
            "tokens_per_iteration": tokens / iterations,
            "seconds_per_iteration": decoded("cpu_s") / iterations,
            "cpu_share": decoded("cpu_s") / decoded("wall_s"),
        }
    c_v, c_d = (
        rows["floor"]["seconds_per_iteration"],
        rows["drafter"]["seconds_per_iteration"],
    )
    for key, row in rows.items():
        row.update(
            c_v_ms=1e3 * c_v,
            c_d_ms=1e3 * c_d,
            speedup=row["tokens_per_s"] / rows["floor"]["tokens_per_s"],
        )
        n_d = VARIANTS[key].drafter_forwards
        if n_d:
            gain = row["tokens_per_iteration"] / rows["floor"]["tokens_per_iteration"]
            row["bound"] = bound(gain, c_d, c_v, n_d)
            row["of_bound"] = row["speedup"] / row["bound"]
            if forward_s is not None:
                c_v_wide = wide_verifier_cost(c_v, forward_s, VARIANTS[key].K + 1)
                row["c_v_wide_ms"] = 1e3 * c_v_wide
                row["bound_wide"] = bound(gain, c_d, c_v, n_d, c_v_wide)
                row["of_bound_wide"] = row["speedup"] / row["bound_wide"]
    return rows


def bound(
    gain: float,
    c_d: float,
    c_v: float,
    drafter_forwards: int,
    c_v_step: float | None = None,
) -> float:
    """Speedup over the Floor (c_v a token) of steps costing drafter_forwards * c_d + c_v_step that emit `gain` x
    the Floor's tokens per iteration: MAL * c_v / ((K + 1) c_d + c_v) for AsymSpec at batch 1 (c_v_step = c_v, the
    default), MAL * c_v / ((K + 1) c_d + c_v(K + 1)) with the verification's measured cost."""
    step_verify = c_v if c_v_step is None else c_v_step
    return gain * c_v / (drafter_forwards * c_d + step_verify)
