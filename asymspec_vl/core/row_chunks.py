"""A step's rows decided a chunk at a time, so that the transient memory of a rule is bounded independent of the
batch (issue 43): each rule is row-wise (a row's decision reads its own logits and draws from its own generator,
in the same order whatever rows share the call), so the chunks commit exactly what one call over every row commits.

A chunk holds at most CHUNK_ELEMENTS logits entries of each name (rows x positions x vocabulary): 12 rows at K = 4
of Qwen's 151,936-token vocabulary, so a rule's temporaries stay within a fixed number of bytes whatever the batch
(at most ~12.5 [64, 151,936] float32 blocks, ~0.5 GB, for the worst rule: docs/benchmarks.md, "The sampler's
memory"); a vocabulary wider than the budget goes one row at a time."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .gate import StepOutcome

CHUNK_ELEMENTS = 12 * 5 * 151_936


def rows_per_chunk(positions: int, vocab: int, budget: int | None = None) -> int:
    """Rows of `positions` logits rows of `vocab` entries each one chunk holds (at least one row); budget: the
    entries of a chunk (CHUNK_ELEMENTS by default)."""
    budget = CHUNK_ELEMENTS if budget is None else budget
    return max(1, budget // max(1, positions * vocab))


def spans(num_rows: int, size: int) -> list[slice]:
    """Consecutive slices of at most `size` rows covering range(num_rows) (one empty slice for no rows)."""
    return [slice(s, min(s + size, num_rows)) for s in range(0, max(num_rows, 1), size)]


def rows_of(outcome: StepOutcome, rows: slice) -> StepOutcome:
    """The outcome of the rows `rows` of a step."""
    div = outcome.divergence
    return StepOutcome(
        outcome.num_accepted[rows],
        outcome.token[rows],
        outcome.is_bonus[rows],
        None if div is None else div[rows],
    )


def cat_outcomes(parts: list[StepOutcome]) -> StepOutcome:
    """The outcomes of consecutive chunks as one outcome, rows in order."""
    if len(parts) == 1:
        return parts[0]
    divergence = (
        None
        if parts[0].divergence is None
        else torch.cat([p.divergence for p in parts])
    )
    return StepOutcome(
        torch.cat([p.num_accepted for p in parts]),
        torch.cat([p.token for p in parts]),
        torch.cat([p.is_bonus for p in parts]),
        divergence,
    )


def logits_rows(logits: dict[str, torch.Tensor], rows: slice) -> dict:
    """The rows `rows` of each logits by name ([B, n, V] each; a missing one stays None)."""
    return {k: None if x is None else x[rows] for k, x in logits.items()}


def vocab_of(logits: dict[str, torch.Tensor]) -> int:
    """The widest vocabulary among a step's logits (across a map: the drafter's or the verifier's)."""
    return max(x.shape[-1] for x in logits.values() if x is not None)


def decide(
    rule: Callable[[dict, torch.Tensor, list | None], StepOutcome],
    logits: dict[str, torch.Tensor],
    drafts: torch.Tensor,
    gens: list | None,
    size: int,
) -> StepOutcome:
    """rule(logits, drafts, gens) over chunks of `size` rows: logits by name [B, n, V], drafts [B, K], gens one
    generator per row (None when the rule draws nothing). -> the step's StepOutcome over every row."""
    return cat_outcomes(
        [
            rule(
                logits_rows(logits, rows),
                drafts[rows],
                None if gens is None else gens[rows],
            )
            for rows in spans(drafts.shape[0], size)
        ]
    )
