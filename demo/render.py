"""HTML for the demo: answers with every token coloured by its trace source, the legend, the stats table."""

from __future__ import annotations

import html

from asymspec_vl import trace as T

# source -> (legend label, background colour). Colour-blind-safe hues (Okabe-Ito), light enough for text.
SOURCE_STYLES = {
    T.DRAFT: ("accepted draft", "#b9e4c9"),
    T.FUSED: ("δ-fused at a rejection", "#ffc78a"),
    T.BONUS: ("verifier bonus", "#a8d1f0"),
    T.VERIFIER: ("verifier (Floor)", "#dcdcdc"),
    T.DRAFTER: ("VL drafter", "#e4c3e8"),
    T.CONTRASTIVE: ("contrastive (SCD)", "#f5e79e"),
}
LEGEND_HELP = {
    T.DRAFT: "a drafter token the gate accepted: p_t(d) > γ_eff·p_b(d)",
    T.FUSED: "argmax(t + β·δ) at the first rejected draft, δ = a − b",
    T.BONUS: "argmax(t) after all K drafts were accepted",
    T.VERIFIER: "the verifier's own greedy token (caption + OCR only)",
    T.DRAFTER: "the VL drafter's own greedy token (image + question)",
    T.CONTRASTIVE: "SCD's contrastive token",
}
METHOD_NAMES = {"asymspec": "AsymSpec", "floor": "Floor", "drafter": "VL drafter", "sd": "SD", "scd": "SCD"}
METHOD_TITLES = {
    "asymspec": "AsymSpec",
    "floor": "Floor: verifier alone on caption + OCR",
    "drafter": "VL drafter alone on image + question",
    "sd": "SD: symmetric speculative decoding",
    "scd": "SCD: speculative contrastive decoding",
}


def token_span(text: str, source: str) -> str:
    """One token as a coloured <span>; its text is HTML-escaped, its source is in the class and tooltip."""
    label, colour = SOURCE_STYLES.get(source, (source, "#ffffff"))
    return (f'<span class="tok tok-{html.escape(source, quote=True)}" title="{html.escape(label, quote=True)}" '
            f'style="background:{colour}">{html.escape(text)}</span>')


def panel_html(method: str, pieces: list[tuple[str, str]], status: str) -> str:
    """One method's panel: its title, its answer as plain text and as coloured tokens (pieces = [(token text,
    trace source)]) and a status line (waiting, decoding, done, stopped, not run)."""
    tokens = "".join(token_span(t, s) for t, s in pieces)
    text = "".join(t for t, _ in pieces).strip()  # the answer as plain text, to read (and copy) above its tokens
    body = (f'<div class="answer-text">{html.escape(text)}</div><div class="answer-tokens">{tokens}</div>'
            if tokens else "")
    return (f'<div class="answer answer-{html.escape(method, quote=True)}" data-method="{html.escape(method)}">'
            f'<div class="answer-title"><b>{html.escape(METHOD_TITLES.get(method, method))}</b></div>'
            f'{body}<div class="answer-status">{html.escape(status)}</div></div>')


def message_html(title: str, text: str) -> str:
    """The one message of the page (a refused upload, an empty question ...); "" clears it."""
    return (f'<div class="message" role="alert"><b>{html.escape(title)}</b><br>{html.escape(text)}</div>'
            if text else "")


def legend_html(sources=(T.DRAFT, T.FUSED, T.BONUS, T.VERIFIER, T.DRAFTER)) -> str:
    """The colour key: one sample chip per source with what it means."""
    items = "".join(f'<li>{token_span(SOURCE_STYLES[s][0], s)} {html.escape(LEGEND_HELP[s])}</li>'
                    for s in sources)
    return f'<ul class="legend" style="list-style:none;padding-left:0;margin:0">{items}</ul>'


def _cell(x: float | int | None, digits: int | None = None) -> str:
    """A figure, or an empty cell where it does not apply to the method."""
    if x is None:
        return ""
    return str(x) if digits is None else f"{x:.{digits}f}"


def stats_row(method: str, stats: T.Stats, fused: int, elapsed_s: float | None, status: str) -> dict:
    """The figures that apply to one method: acceptance rate and mean accepted length where drafts were made
    (AsymSpec, SD, SCD), δ-fused tokens for AsymSpec only. elapsed_s: wall time so far while decoding
    (stats.elapsed_s is set only when decoding ends)."""
    elapsed = stats.elapsed_s if stats.elapsed_s > 0 else (elapsed_s or 0.0)
    speculative = stats.drafted > 0
    return {
        "method": method,
        "tokens": stats.emitted,
        "steps": stats.steps,
        "acceptance_rate": stats.acceptance_rate if speculative else None,
        "mean_accepted_length": stats.mean_accepted_length if speculative else None,
        "fused": fused if method == "asymspec" else None,
        "tokens_per_s": stats.emitted / elapsed if elapsed > 0 else None,
        "status": status,
    }


STATS_COLUMNS = ("method", "tokens", "steps", "acceptance rate", "mean accepted length", "δ-fused tokens",
                 "tokens/s", "× Floor", "status")


def _times_floor(row: dict, rows: list[dict]) -> str:
    """tokens/s over the Floor's in the same run ("1.09"), empty for the Floor itself or without its row."""
    floor = next((r["tokens_per_s"] for r in rows if r["method"] == "floor"), None)
    if row["method"] == "floor" or not floor or row["tokens_per_s"] is None:
        return ""
    return f"{row['tokens_per_s'] / floor:.2f}"


def stats_html(rows: list[dict]) -> str:
    """A table with one row per method that has started (none: no table); figures that do not apply are empty."""
    if not rows:
        return ""
    head = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in STATS_COLUMNS) + "</tr>"
    body = "".join(
        f'<tr class="stats-{html.escape(r["method"], quote=True)}">'
        f'<td>{html.escape(METHOD_NAMES.get(r["method"], r["method"]))}</td>'
        f'<td>{r["tokens"]}</td><td>{r["steps"]}</td><td>{_cell(r["acceptance_rate"], 2)}</td>'
        f'<td>{_cell(r["mean_accepted_length"], 2)}</td><td>{_cell(r["fused"])}</td>'
        f'<td>{_cell(r["tokens_per_s"], 1)}</td><td>{_times_floor(r, rows)}</td><td>{html.escape(r["status"])}</td>'
        '</tr>'
        for r in rows)
    return f'<table class="stats">{head}{body}</table>'
