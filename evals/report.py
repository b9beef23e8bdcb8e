"""Result tables written as Markdown, CSV and JSON, and grouped bar charts (PNG), for every eval."""

from __future__ import annotations

import csv
import json
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


def write_table(rows: list[dict], columns: list[str], out_dir: str | Path, stem: str,
                title: str = "") -> dict[str, Path]:
    """Write stem.md, stem.csv and stem.json under out_dir; return their paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{stem}.md", "csv": out / f"{stem}.csv", "json": out / f"{stem}.json"}
    header = f"# {title}\n\n" if title else ""
    paths["md"].write_text(header + markdown_table(rows, columns) + "\n")
    with paths["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    paths["json"].write_text(json.dumps({"title": title, "columns": columns, "rows": rows}, indent=2))
    return paths


def plot_bars(rows: list[dict], label_col: str, value_cols: list[str], out_path: str | Path,
              title: str = "", ylabel: str = "accuracy (%)") -> Path:
    """One PNG: for each value column a group of bars, one bar per row (e.g. per method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(1, len(rows))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(value_cols) + 2), 3.2), dpi=100)
    for i, row in enumerate(rows):
        xs = [j + i * width for j in range(len(value_cols))]
        ax.bar(xs, [float(row.get(c) or 0.0) for c in value_cols], width, label=str(row[label_col]))
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(value_cols))], value_cols)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncols=min(4, len(rows)))
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
