"""The decoding loop (Algorithm 1), backend-independent: draft K, score, decide, commit, roll back.

One step for a batch of rows:
  1. the drafting source reads its pending tokens and drafts d_1..d_K greedily (K one-token forwards);
  2. each scoring source reads pending + d_1..d_K in one forward: logits at the K+1 positions;
  3. `decide` (the gate/fusion math of gate.py) returns how many drafts each row keeps and the token after;
  4. the committed tokens are appended to y, and every source keeps what y confirms (rollback of the rest).
Methods are configurations of this one loop (see `plan_*`): AsymSpec drafts with the drafter on x_full and
scores with the drafter on x_comp (b) and the verifier (t); SD/SCD draft on x_comp; Floor and drafter-alone
are the K = 0 case (one scoring forward, its greedy token).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import trace as T
from .config import AsymSpecConfig
from .gate import StepOutcome, greedy, greedy_verify, scd_scores
from .kernels.dispatch import asymspec_step  # Triton on CUDA, gate.asymspec_step elsewhere
from .sources import LogitSource

# decide(draft_logits [B, K or K+1, V] | None, scores: list of [B, K+1, V], drafts [B, K]) -> StepOutcome
Decide = Callable[[torch.Tensor | None, list[torch.Tensor], torch.Tensor], StepOutcome]


@dataclass
class Plan:
    """How one method maps onto the loop."""

    K: int
    drafter: LogitSource | None  # drafts greedily; None when K = 0
    scorers: list[LogitSource]  # each scores pending + drafts in one forward
    decide: Decide
    draft_last: bool = False  # also run the drafter on d_K (a_{K+1} needed)
    labels: tuple[str, str, str] = (T.DRAFT, T.FUSED, T.BONUS)  # accepted, at rejection, all passed


@dataclass
class RowOutput:
    """What the loop produced for one row."""

    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # one of trace.TOKEN_SOURCES per token
    stats: T.Stats = field(default_factory=T.Stats)
    finish_reason: str = "length"  # "stop" | "length" | "error" (a backend could not decode this row)
    error: str = ""  # why, when finish_reason is "error"


def plan_asymspec(cfg: AsymSpecConfig, full: LogitSource, comp: LogitSource, verifier: LogitSource,
                  banned: torch.Tensor | None) -> Plan:
    def decide(a, scores, drafts):
        b, t = scores
        if a.shape[1] == cfg.K:  # a_{K+1} not drafted (bonus = argmax t_{K+1} does not read it)
            a = torch.cat([a, b[:, -1:]], dim=1)
        return asymspec_step(a, b, t, drafts, cfg, banned)
    return Plan(cfg.K, full, [comp, verifier], decide, draft_last=cfg.bonus == "fused")


def plan_sd(cfg: AsymSpecConfig, drafter: LogitSource, verifier: LogitSource, banned) -> Plan:
    return Plan(cfg.K, drafter, [verifier], lambda a, s, d: greedy_verify(s[0], d, banned),
                labels=(T.DRAFT, T.VERIFIER, T.BONUS))


def plan_scd(cfg: AsymSpecConfig, comp: LogitSource, verifier: LogitSource, banned) -> Plan:
    def decide(b, scores, drafts):
        return greedy_verify(scd_scores(scores[0], b, cfg.beta, cfg.scd_alpha), drafts, banned)
    return Plan(cfg.K, comp, [verifier], decide, draft_last=True,
                labels=(T.DRAFT, T.CONTRASTIVE, T.CONTRASTIVE))


def plan_greedy(source: LogitSource, banned, label: str) -> Plan:
    return Plan(0, None, [source], lambda a, s, d: greedy_verify(s[0], d, banned), labels=(label, label, label))


def run(plan: Plan, batch: int, max_new: list[int], stop_ids: set[int], banned: torch.Tensor | None,
        on_step: Callable[[list[RowOutput]], None] | None = None) -> list[RowOutput]:
    """Decode until every row hits a stop token or its token budget max_new[r]."""
    out = [RowOutput(stats=T.Stats(accepted_at=[0] * plan.K)) for _ in range(batch)]
    y: list[list[int]] = [[] for _ in range(batch)]
    active = [m > 0 for m in max_new]
    start = time.perf_counter()
    while any(active):
        drafts, draft_logits = _draft(plan, y, active, banned)
        scores = []
        for src in plan.scorers:
            feed = [p + d if on else [] for p, d, on in zip(src.pending(y), drafts.tolist(), active)]
            scores.append(src.forward(feed)[:, -(plan.K + 1):])  # [B, K+1, V]
        drafts = drafts.to(scores[0].device)
        outcome = plan.decide(draft_logits, scores, drafts)
        for r, new in enumerate(outcome.committed(drafts)):
            if active[r]:
                active[r] = _append(out[r], y[r], new, outcome, r, plan, max_new[r], stop_ids)
        for src in ([plan.drafter] if plan.drafter else []) + plan.scorers:
            src.commit(y)
        if on_step:
            on_step(out)
    elapsed = time.perf_counter() - start
    for o in out:
        o.stats.elapsed_s = elapsed
    return out


def _draft(plan: Plan, y, active, banned) -> tuple[torch.Tensor, torch.Tensor | None]:
    """K greedy drafts per row [B, K] and the drafter's logits at those positions [B, K(+1), V]."""
    if plan.K == 0:
        return torch.zeros(len(y), 0, dtype=torch.long), None  # moved to the scorers' device by run()
    src = plan.drafter
    feed = [p if on else [] for p, on in zip(src.pending(y), active)]
    logits = [src.forward(feed)[:, -1]]  # [B, V]
    drafts = []
    for i in range(plan.K):
        d = greedy(logits[-1], banned)  # [B]
        drafts.append(d)
        if i < plan.K - 1 or plan.draft_last:
            logits.append(src.forward([[x] if on else [] for x, on in zip(d.tolist(), active)])[:, -1])
    return torch.stack(drafts, 1), torch.stack(logits, 1)


def _append(o: RowOutput, yr: list[int], new: list[int], outcome: StepOutcome, r: int, plan: Plan,
            max_new: int, stop_ids: set[int]) -> bool:
    """Commit one row's new tokens (cut at a stop token or the budget); return whether it goes on."""
    n_acc, is_bonus = int(outcome.num_accepted[r]), bool(outcome.is_bonus[r])
    st = o.stats
    st.steps += 1
    st.drafted += plan.K
    st.accepted += n_acc
    for i in range(n_acc):
        st.accepted_at[i] += 1
    labels = [plan.labels[0]] * n_acc + [plan.labels[2] if is_bonus else plan.labels[1]]
    for tok, label in zip(new, labels):
        yr.append(tok)
        o.token_ids.append(tok)
        o.sources.append(label)
        st.emitted += 1
        if tok in stop_ids:
            o.finish_reason = "stop"
            return False
        if len(yr) >= max_new:
            o.finish_reason = "length"
            return False
    return True
