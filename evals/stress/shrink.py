"""Reduce a failing stress workload to a smaller one that still fails the same way (delta debugging, greedy):
drop rows one at a time, then move each engine setting to its plain default, keeping every change after which
the case still shows a mismatch of the same kind. Each try starts an engine (tens of seconds on the CPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .case import CaseReport
from .workload import EngineCase, Workload

PLAIN_ENGINE = EngineCase()  # vLLM's defaults where the stress axes have one


def same_failure(report: CaseReport, kinds: set[str]) -> bool:
    return any(m.what in kinds for m in report.mismatches)


def shrink(
    workload: Workload,
    run: Callable[[Workload], CaseReport],
    log: Callable[[str], None] = print,
) -> Workload:
    """The smallest workload found that still fails like `workload` (run it first to learn how it fails)."""
    first = run(workload)
    kinds = {m.what for m in first.mismatches}
    if not kinds:
        return workload
    best, i = workload, 0
    while i < len(best.rows) and len(best.rows) > 1:
        trial = dataclasses.replace(best, rows=best.rows[:i] + best.rows[i + 1 :])
        if same_failure(run(trial), kinds):
            best = trial
            log(f"shrink: without row {i}: still fails ({len(best.rows)} rows)")
        else:
            i += 1
    for name in (
        "preempt",
        "small_pool",
        "max_num_batched_tokens",
        "prefix_caching",
        "processes",
        "tp",
        "compiled",
        "pair",
    ):
        plain = getattr(PLAIN_ENGINE, name)
        if getattr(best.engine, name) != plain:
            trial = dataclasses.replace(
                best, engine=dataclasses.replace(best.engine, **{name: plain})
            )
            if same_failure(run(trial), kinds):
                best = trial
                log(f"shrink: {name}={plain}: still fails")
    return best
