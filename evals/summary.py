"""Eval records -> per-method rows (accuracy per group, overall, tokens/s, acceptance) -> tables and charts.

Generic over evals: a record is a runner record (evals/jobs.py) with "method", "correct" (bool or None)
and "stats" {"emitted", "elapsed_s", "steps", "drafted", "accepted"}; groups select records by a field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .report import plot_bars, write_table

SPEED_COLUMNS = ["tokens/s", "acceptance rate", "mean accepted length"]


def accuracy(records: list[dict]) -> float | None:
    """Percent of records with correct == True among those scored (errors count as wrong); None if none."""
    scored = [r for r in records if r.get("correct") is not None]
    return (
        100.0 * sum(r["correct"] is True for r in scored) / len(scored)
        if scored
        else None
    )


def speed(records: list[dict]) -> dict:
    """Pooled decoding figures: tokens/s = sum emitted / sum seconds; acceptance rate = accepted / drafted
    (None for methods that draft nothing); mean accepted length = emitted / steps."""
    tot = {k: 0.0 for k in ("emitted", "elapsed_s", "steps", "drafted", "accepted")}
    for r in records:
        for k in tot:
            tot[k] += float((r.get("stats") or {}).get(k, 0.0))
    return {
        "tokens/s": tot["emitted"] / tot["elapsed_s"] if tot["elapsed_s"] > 0 else None,
        "acceptance rate": tot["accepted"] / tot["drafted"]
        if tot["drafted"] > 0
        else None,
        "mean accepted length": tot["emitted"] / tot["steps"]
        if tot["steps"] > 0
        else None,
    }


def summarize(
    records: list[dict],
    groups: dict[str, Callable[[dict], bool]],
    methods: list[str] | None = None,
    names: dict[str, str] | None = None,
    overall: str = "Overall",
) -> list[dict]:
    """One row per method (in `methods` order, else first-seen order): accuracy in each group column,
    overall accuracy, n, errors, and the pooled speed figures. names maps method -> row label."""
    order = (
        list(methods) if methods else list(dict.fromkeys(r["method"] for r in records))
    )
    rows = []
    for m in order:
        mine = [r for r in records if r.get("method") == m]
        row = {"method": (names or {}).get(m, m)}
        for col, member in groups.items():
            row[col] = accuracy([r for r in mine if member(r)])
        row[overall] = accuracy(mine)
        row["n"] = len(mine)
        row["errors"] = sum(1 for r in mine if r.get("error"))
        row.update(speed(mine))
        rows.append(row)
    return rows


def write_summary(
    rows: list[dict],
    columns: list[str],
    out_dir: str | Path,
    stem: str,
    title: str,
    chart_columns: list[str],
) -> dict[str, Path]:
    """stem.md / .csv / .json, one bar chart per chart column (stem_<column>.png) and one with all of them
    (stem.png); returns the paths by name."""
    out = Path(out_dir)
    paths = dict(write_table(rows, columns, out, stem, title))
    for col in chart_columns:
        safe = "".join(ch if ch.isalnum() else "_" for ch in col)
        paths[f"png:{col}"] = plot_bars(
            rows, "method", [col], out / f"{stem}_{safe}.png", title=f"{title}: {col}"
        )
    paths["png"] = plot_bars(
        rows, "method", chart_columns, out / f"{stem}.png", title=title
    )
    return paths
