"""Result tables written as Markdown, CSV and JSON, and grouped bar charts (PNG), for every eval."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return "" if v is None else str(v)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A GitHub-flavoured Markdown table of `rows`, one column per key in `columns`."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_table(
    rows: list[dict],
    columns: list[str],
    out_dir: str | Path,
    stem: str,
    title: str = "",
) -> dict[str, Path]:
    """Write stem.md, stem.csv and stem.json under out_dir; return their paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": out / f"{stem}.md",
        "csv": out / f"{stem}.csv",
        "json": out / f"{stem}.json",
    }
    header = f"# {title}\n\n" if title else ""
    paths["md"].write_text(header + markdown_table(rows, columns) + "\n")
    with paths["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    paths["json"].write_text(
        json.dumps({"title": title, "columns": columns, "rows": rows}, indent=2)
    )
    return paths


def plot_bars(
    rows: list[dict],
    label_col: str,
    value_cols: list[str],
    out_path: str | Path,
    title: str = "",
    ylabel: str = "accuracy (%)",
) -> Path:
    """One PNG: for each value column a group of bars, one bar per row (e.g. per method). The figure grows with
    the bars (each at least BAR_IN wide), the legend sits outside the axes on the right (it never covers a
    bar), the title is wrapped to the figure's width above both, and matplotlib's constrained layout keeps all of it on
    the canvas."""
    import matplotlib  # lazy: loads matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: loads matplotlib

    n, groups = max(1, len(rows)), max(1, len(value_cols))
    labels = [str(r[label_col]) for r in rows]
    legend_in = 0.75 + 0.075 * max(
        (len(x) for x in labels), default=0
    )  # the legend's width, 8 pt text
    axes_in = max(
        3.0, groups * (n * BAR_IN / 0.8)
    )  # bars take 0.8 of each group's slot
    fig_w = axes_in + legend_in + 0.9  # + the y axis' label and ticks
    fig = plt.figure(
        figsize=(fig_w, 3.6 + 0.16 * max(0, n - 12)), dpi=100, layout="constrained"
    )
    ax = fig.add_subplot()
    width = 0.8 / n
    values = [[float(row.get(c) or 0.0) for c in value_cols] for row in rows]
    for i, (label, ys) in enumerate(zip(labels, values)):
        ax.bar([j + i * width for j in range(len(value_cols))], ys, width, label=label)
    ax.set_xticks([j + width * (n - 1) / 2 for j in range(len(value_cols))], value_cols)
    top = max((y for ys in values for y in ys), default=0.0)
    ax.set_ylim(0, top * 1.05 if top > 0 else 1.0)
    ax.set_ylabel(ylabel)
    if title:  # above the axes and the legend both
        fig.suptitle(textwrap.fill(title, width=max(20, int(fig_w * 11))), fontsize=10)
    # beside the axes' top right; constrained layout makes room for it (and puts the title above both)
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        fontsize=8,
        frameon=False,
    )
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


BAR_IN = 0.16  # the narrowest bar, in inches (16 pixels at the charts' 100 dpi)
