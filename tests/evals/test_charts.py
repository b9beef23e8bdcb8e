"""The eval bar charts fit their canvas: title and legend inside it, the legend clear of every bar (a 100 % bar
too), bars not squeezed; for the per-task chart (one column, ten methods) and the all-tasks chart."""

import pytest
from asymspec_vl.evals.report import plot_bars
from matplotlib.figure import Figure

METHODS = [
    "VL drafter alone",
    "Floor",
    "SD (K=2)",
    "SCD (K=2, β=1)",
    "AsymSpec K=2 β=0",
    "AsymSpec K=2 β=1",
    "AsymSpec K=4 β=0",
    "AsymSpec K=4 β=1",
    "AsymSpec K=2 β=1 fused bonus",
    "AsymSpec K=4 β=1 fused bonus",
]
ROWS = [
    {
        "method": m,
        "read": 100.0,
        "sum": 40.0 + 5 * i,
        "mult": 100.0 - 3 * i,
        "Overall": 80.0 + i,
    }
    for i, m in enumerate(METHODS)
]


@pytest.fixture
def saved(monkeypatch):
    """The figures plot_bars saves, with the renderer that drew them (before the figure is closed)."""
    figures, save = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        save(fig, *args, **kwargs)
        figures.append((fig, fig.canvas.get_renderer()))

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _inside(inner, outer) -> bool:
    return (
        inner.x0 >= outer.x0 - 0.5
        and inner.y0 >= outer.y0 - 0.5
        and inner.x1 <= outer.x1 + 0.5
        and inner.y1 <= outer.y1 + 0.5
    )


@pytest.mark.parametrize(
    "columns, title",
    [
        (["read"], "Toy world (held-out): read"),
        (
            ["Overall"],
            "MathVista testmini (all 1,000 questions, answers extracted by rule): Overall",
        ),
        (["read", "sum", "mult", "Overall"], "Toy world (held-out)"),
    ],
)
def test_the_chart_fits_its_canvas(saved, tmp_path, columns, title):
    out = plot_bars(ROWS, "method", columns, tmp_path / "chart.png", title=title)
    assert out.read_bytes()[:4] == b"\x89PNG"
    ((fig, renderer),) = saved
    ax = fig.axes[0]
    canvas = fig.bbox
    legend = (fig.legends or [ax.get_legend()])[0].get_window_extent(renderer)
    title_box = (fig._suptitle or ax.title).get_window_extent(
        renderer
    )  # the figure's title, else the axes'
    assert (fig._suptitle or ax.title).get_text().replace("\n", " ") == title
    bars = [b.get_window_extent(renderer) for b in ax.patches]
    assert len(bars) == len(ROWS) * len(columns)
    assert _inside(title_box, canvas), (title_box, canvas)
    assert _inside(legend, canvas), (legend, canvas)
    assert not title_box.overlaps(legend)
    assert not any(legend.overlaps(b) for b in bars), "the legend covers a bar"
    assert min(b.width for b in bars) >= 15, "the bars are squeezed"
    assert all(
        _inside(b, ax.bbox) for b in bars
    )  # a 100 % bar is not cut by the axes' top
