"""The decoding loop (Algorithm 1), backend-independent: draft K, score, decide, commit, roll back.

One step for a batch of rows:
  1. the drafting source reads its pending tokens and drafts d_1..d_K greedily (K one-token forwards);
  2. each scoring source reads pending + d_1..d_K in one forward: logits at the K+1 positions;
  3. the method's rule (gate.py) returns how many drafts each row keeps and the token after (a chunk of rows at a
     time, row_chunks.py: its transient memory bounded independent of batch);
  4. the committed tokens are appended to y, and every source keeps what y confirms (rollback of the rest).
Every method is this one loop with the sources and rule of its row in methods.py: AsymSpec drafts with the
drafter on x_full and scores with the drafter on x_comp (b) and the verifier (t); SD and SCD draft on x_comp;
Floor and drafter-alone have no drafting source (K = 0: one scoring forward, its greedy token).
At temperature > 0 the drafts are drawn from the drafting source's filtered distribution and the method's
sampled rule decides (sampling.py), with one generator per row seeded by cfg.seed. Before cfg.min_tokens
tokens are out, the stop tokens' logits are -inf in every logits the step reads (vLLM's min-tokens logits
processor, min_tokens.py); stop strings end a row as vLLM's detokenizer ends it (stop_strings.py). With cfg.logprobs
each committed token gets its logprob from the step's logits (logprobs.py).
A cross-family pair (a VocabMap that is not the identity) keeps y and the drafts in verifier ids: the drafter's
sources read them through the map (mapped_source.py), draft over the shared set, and the rules of
vocab_align.py decide (vocab_sampling.py's at temperature > 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from . import row_chunks, sampling, vocab_align, vocab_sampling
from . import trace as T
from .config import AsymSpecConfig
from .gate import StepOutcome, greedy
from .logprobs import PromptLogprob, TokenLogprob, step_logprobs
from .mapped_source import MappedSource
from .methods import Method, Source
from .min_tokens import MinTokens
from .request_plan import RequestPlan
from .sources import LogitSource
from .stop_strings import StopStrings


@dataclass
class Plan:
    """One method on the loop: its sources and its rule for this run's config."""

    method: Method
    cfg: AsymSpecConfig
    drafter: LogitSource | None  # drafts greedily; None for a method without drafts
    scorers: list[
        LogitSource
    ]  # each scores pending + drafts in one forward, in method.scoring's order
    banned: torch.Tensor | None  # [V] bool: tokens no rule may emit
    gens: list[torch.Generator] | None = (
        None  # one per row at temperature > 0 (run() makes them)
    )
    vmap: vocab_align.VocabMap | None = (
        None  # a cross-family pair's map (None: one vocabulary)
    )

    @property
    def K(self) -> int:
        return self.cfg.K if self.method.speculative else 0

    @property
    def draft_last(self) -> bool:
        """The drafter also reads d_K: its logits at position K+1 are part of the rule."""
        return self.method.drafts_last(self.cfg)

    def logits(
        self, drafted: torch.Tensor | None, scores: list[torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """The step's logits by name (methods.py): drafted, the drafting source's [B, K or K+1, V]; scores, each
        scorer's [B, K+1, V]."""
        logits = {source.logits: x for source, x in zip(self.method.scoring, scores)}
        if self.method.drafting is not None:
            logits[self.method.drafting.logits] = drafted
        return logits

    def decide(
        self, logits: dict[str, torch.Tensor], drafts: torch.Tensor
    ) -> StepOutcome:
        """The method's rule on the step's logits by name (Plan.logits) and drafts [B, K], a chunk of rows at a
        time (row_chunks.py: the rule's transient memory bounded independent of batch, the same outcome)."""
        size = row_chunks.rows_per_chunk(
            drafts.shape[1] + 1, row_chunks.vocab_of(logits)
        )
        return row_chunks.decide(self.rule, logits, drafts, self.gens, size)

    def rule(
        self, logits: dict[str, torch.Tensor], drafts: torch.Tensor, gens: list | None
    ) -> StepOutcome:
        """The method's rule on rows' logits by name and drafts, gens their generators (at temperature > 0)."""
        if self.vmap is not None and self.cfg.samples:
            return vocab_sampling.sample(
                self.method.name,
                self.cfg,
                logits,
                drafts,
                self.banned,
                self.vmap,
                gens,
            )
        if self.vmap is not None:
            return vocab_align.decide(
                self.method.name, self.cfg, logits, drafts, self.banned, self.vmap
            )
        if self.cfg.samples:
            return self.method.sample(self.cfg, logits, drafts, self.banned, gens)
        return self.method.decide(self.cfg, logits, drafts, self.banned)

    def logprobs(
        self,
        logits: dict[str, torch.Tensor],
        outcome: StepOutcome,
        drafts: torch.Tensor,
    ) -> list[list[TokenLogprob]]:
        """Per row, the TokenLogprob of each token the step commits (logprobs.step_logprobs), a chunk of rows at a
        time as decide."""
        size = row_chunks.rows_per_chunk(
            drafts.shape[1] + 1, row_chunks.vocab_of(logits)
        )
        return [
            row
            for rows in row_chunks.spans(drafts.shape[0], size)
            for row in step_logprobs(
                self.method.name,
                self.cfg,
                row_chunks.logits_rows(logits, rows),
                row_chunks.rows_of(outcome, rows),
                drafts[rows],
                self.cfg.logprobs,
                self.vmap,
            )
        ]

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """The drafts of one position [B, V] -> [B]: greedy, or drawn from the filtered distribution. Across a
        map: over the drafter's shared tokens [B, Vd] (vocab_sampling.pick when sampling), in verifier ids."""
        if self.vmap is not None and self.cfg.samples:
            return vocab_sampling.pick(
                logits, self.cfg, self.banned, self.vmap, self.gens
            )
        if self.vmap is not None:
            picked = greedy(
                logits, self.vmap.drafter_banned(self.banned, logits.device)
            )
            return self.vmap.to_verifier_ids(picked)
        if self.cfg.samples:
            return sampling.draw(
                sampling.filtered_logprobs(logits, self.cfg, self.banned), self.gens
            )
        return greedy(logits, self.banned)


@dataclass
class RowOutput:
    """What the loop produced for one row."""

    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(
        default_factory=list
    )  # one of trace.TOKEN_SOURCES per token
    stats: T.Stats = field(default_factory=T.Stats)
    finish_reason: str = (
        "length"  # "stop" | "length" | "error" (a backend could not decode this row)
    )
    error: str = ""  # why, when finish_reason is "error"
    text: str | None = (
        None  # the answer's text when a stop string cut it (None: the decoded token_ids)
    )
    logprobs: list[TokenLogprob] | None = (
        None  # one per token when cfg.logprobs is set (core/logprobs.py)
    )
    # one per x_comp token when cfg.prompt_logprobs is set, None first (core/logprobs.py, prompt_logprobs)
    prompt_logprobs: list[PromptLogprob | None] | None = None
    plan: RequestPlan | None = None  # what ran: set by the backend that ran the row
    done: bool = False  # the loop stopped the row: the step that set it was its last (on_step sees it)


def plan(
    method: Method,
    cfg: AsymSpecConfig,
    source: Callable[[Source], LogitSource],
    banned: torch.Tensor | None,
    vmap: vocab_align.VocabMap | None = None,
) -> Plan:
    """The plan of `method`: source(s) makes the logit source of each model + view the method reads. vmap: the
    pair's map; across one that is not the identity, the drafter's sources read verifier ids through it."""
    if vmap is not None and vmap.identity:
        vmap = None
    if vmap is not None:
        inner = source

        def source(
            s: Source,
        ) -> LogitSource:  # the drafter's sources read verifier ids through the map
            return inner(s) if s.model == "verifier" else MappedSource(inner(s), vmap)

    drafter = source(method.drafting) if method.drafting is not None else None
    return Plan(
        method, cfg, drafter, [source(s) for s in method.scoring], banned, vmap=vmap
    )


def run(
    plan: Plan,
    batch: int,
    max_new: list[int],
    stop_ids: set[int],
    on_step: Callable[[list[RowOutput]], None] | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> list[RowOutput]:
    """Decode until every row hits a stop token, a stop string (cfg.stop, found in decode(token_ids)) or its
    token budget max_new[r]. The prompts are read before the clock starts (tokens/s measures decoding)."""
    cfg = plan.cfg
    out = [
        RowOutput(
            stats=T.Stats(accepted_at=[0] * plan.K),
            logprobs=[] if cfg.logprobs is not None else None,
        )
        for _ in range(batch)
    ]
    y: list[list[int]] = [[] for _ in range(batch)]
    active = [m > 0 for m in max_new]
    texts = (
        [
            StopStrings(
                decode, cfg.stop, cfg.include_stop_str_in_output, cfg.min_tokens
            )
            for _ in range(batch)
        ]
        if cfg.stop
        else None
    )
    if cfg.samples:
        plan.gens = sampling.generators(
            cfg, batch, plan.banned.device if plan.banned is not None else "cpu"
        )
    hold = (
        MinTokens(cfg.min_tokens, stop_ids, y) if cfg.min_tokens and stop_ids else None
    )
    hold_own = (
        hold.mapped(plan.vmap) if hold is not None and plan.vmap is not None else hold
    )  # drafter ids
    for src in _sources(plan):
        src.prefill()
    start = time.perf_counter()
    while any(active):
        drafts, draft_logits = _draft(plan, y, active, hold_own)
        scores = []
        for src in plan.scorers:
            feed = [
                p + _own(src, d) if on else []
                for p, d, on in zip(src.pending(y), drafts.tolist(), active)
            ]
            x = src.forward(feed)[:, -(plan.K + 1) :]  # [B, K+1, V]
            held = hold_own if isinstance(src, MappedSource) else hold
            scores.append(held.mask(x, 0) if held else x)
        drafts = drafts.to(scores[0].device)
        logits = plan.logits(draft_logits, scores)
        outcome = plan.decide(logits, drafts)
        accepted = outcome.num_accepted.tolist()
        lps = (
            plan.logprobs(logits, outcome, drafts) if cfg.logprobs is not None else None
        )
        for r, new in enumerate(outcome.committed(drafts)):
            if active[r]:
                labels = T.step_sources(plan.method.labels, plan.K, accepted[r])
                before = len(y[r])
                active[r] = _append(
                    out[r],
                    y[r],
                    new,
                    labels,
                    plan.K,
                    accepted[r],
                    max_new[r],
                    stop_ids,
                    cfg.min_tokens,
                    lps[r] if lps else None,
                )
                if texts is not None and texts[r].after_step(y[r], before):
                    out[r].finish_reason, out[r].text, active[r] = (
                        "stop",
                        texts[r].text,
                        False,
                    )
        for src in _sources(plan):
            src.commit(y)
        for o, on in zip(out, active):
            o.done = not on
        if on_step:
            on_step(out)
    elapsed = time.perf_counter() - start
    for o in out:
        o.stats.elapsed_s = elapsed
    return out


def _own(src: LogitSource, ids: list[int]) -> list[int]:
    """The loop's ids (the verifier's) in `src`'s own ids."""
    return src.own(ids) if isinstance(src, MappedSource) else ids


def _sources(plan: Plan) -> list[LogitSource]:
    return ([plan.drafter] if plan.drafter else []) + plan.scorers


def _draft(
    plan: Plan, y, active, hold: MinTokens | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """K drafts per row [B, K] (greedy, or drawn at temperature > 0) and the drafter's logits at those
    positions [B, K(+1), V]."""
    if plan.K == 0:
        return torch.zeros(
            len(y), 0, dtype=torch.long
        ), None  # moved to the scorers' device by run()
    src = plan.drafter
    feed = [p if on else [] for p, on in zip(src.pending(y), active)]
    logits = [src.forward(feed)[:, -1]]  # [B, V]
    drafts = []
    for i in range(plan.K):
        if hold:
            logits[-1] = hold.mask(logits[-1][:, None], i)[:, 0]
        d = plan.pick(logits[-1])  # [B]
        drafts.append(d)
        if i < plan.K - 1 or plan.draft_last:
            logits.append(
                src.forward(
                    [_own(src, [x]) if on else [] for x, on in zip(d.tolist(), active)]
                )[:, -1]
            )
    if hold and len(logits) > plan.K:
        logits[-1] = hold.mask(logits[-1][:, None], plan.K)[:, 0]
    return torch.stack(drafts, 1), torch.stack(logits, 1)


def _append(
    o: RowOutput,
    yr: list[int],
    new: list[int],
    labels: list[str],
    num_drafts: int,
    num_accepted: int,
    max_new: int,
    stop_ids: set[int],
    min_tokens: int = 0,
    logprobs: list | None = None,
) -> bool:
    """Commit one row's new tokens (cut after a stop token, then at the budget); return whether it goes on.
    A stop token before min_tokens tokens does not stop (vLLM's check_stop)."""
    kept, going = [], True
    for tok in new:
        kept.append(tok)
        if tok in stop_ids and len(yr) + len(kept) >= min_tokens:
            o.finish_reason, going = "stop", False
            break
        if len(yr) + len(kept) >= max_new:
            o.finish_reason, going = "length", False
            break
    yr.extend(kept)
    o.token_ids.extend(kept)
    o.sources.extend(labels[: len(kept)])
    if logprobs is not None:
        o.logprobs.extend(logprobs[: len(kept)])
    o.stats.record(num_drafts, num_accepted, len(kept))
    return going
