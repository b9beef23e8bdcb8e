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
            f'style="background:{colour};border-radius:3px;padding:0 1px">{html.escape(text)}</span>')


def answer_html(method: str, pieces: list[tuple[str, str]], status: str = "") -> str:
    """The answer of `method` as coloured tokens; pieces = [(token text, trace source)]."""
    body = "".join(token_span(t, s) for t, s in pieces) or '<span class="placeholder">…</span>'
    status_html = f'<div class="answer-status">{html.escape(status)}</div>' if status else ""
    return (f'<div class="answer answer-{html.escape(method, quote=True)}" data-method="{html.escape(method)}">'
            f'<div class="answer-title"><b>{html.escape(METHOD_TITLES.get(method, method))}</b></div>'
            f'<div class="answer-tokens" style="white-space:pre-wrap;line-height:1.9;font-family:monospace">'
            f'{body}</div>{status_html}</div>')


def placeholder_html(method: str, text: str) -> str:
    """A panel with a message instead of an answer (not run, waiting)."""
    return (f'<div class="answer answer-{html.escape(method, quote=True)}" data-method="{html.escape(method)}">'
            f'<div class="answer-title"><b>{html.escape(METHOD_TITLES.get(method, method))}</b></div>'
            f'<div class="answer-status">{html.escape(text)}</div></div>')


def legend_html(sources=(T.DRAFT, T.FUSED, T.BONUS, T.VERIFIER, T.DRAFTER)) -> str:
    """The colour key: one sample chip per source with what it means."""
    items = "".join(f'<li>{token_span(SOURCE_STYLES[s][0], s)} {html.escape(LEGEND_HELP[s])}</li>'
                    for s in sources)
    return f'<ul class="legend" style="list-style:none;padding-left:0;margin:0">{items}</ul>'


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def stats_row(method: str, stats: T.Stats, sources: list[str], elapsed_s: float | None = None,
              finish: str = "") -> dict:
    """The figures shown for one method. Acceptance figures only where drafts were made (AsymSpec, SD).
    elapsed_s: wall time so far while streaming (stats.elapsed_s is set only when decoding ends)."""
    elapsed = stats.elapsed_s if stats.elapsed_s > 0 else (elapsed_s or 0.0)
    return {
        "method": method,
        "tokens": stats.emitted,
        "steps": stats.steps,
        "acceptance_rate": stats.acceptance_rate if stats.drafted else None,
        "mean_accepted_length": stats.mean_accepted_length if stats.steps else None,
        "tokens_per_s": stats.emitted / elapsed if elapsed > 0 else None,
        "fused": sum(s == T.FUSED for s in sources),
        "finish": finish,
    }


def stats_html(rows: list[dict]) -> str:
    """A table with one row per method: tokens, steps, acceptance rate, mean accepted length, δ-fused
    tokens, tokens/s, finish reason (stop / length / running)."""
    head = ("<tr><th>method</th><th>tokens</th><th>steps</th><th>acceptance rate</th>"
            "<th>mean accepted length</th><th>δ-fused tokens</th><th>tokens/s</th><th>finish</th></tr>")
    body = "".join(
        f'<tr class="stats-{html.escape(r["method"], quote=True)}">'
        f'<td>{html.escape(METHOD_NAMES.get(r["method"], r["method"]))}</td>'
        f'<td>{r["tokens"]}</td><td>{r["steps"]}</td><td>{_fmt(r["acceptance_rate"])}</td>'
        f'<td>{_fmt(r["mean_accepted_length"])}</td><td>{r["fused"]}</td><td>{_fmt(r["tokens_per_s"], 1)}</td>'
        f'<td>{html.escape(r["finish"])}</td></tr>'
        for r in rows)
    return f'<table class="stats" style="width:100%">{head}{body}</table>'
