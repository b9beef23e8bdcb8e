"""HTML for the demo: answers with every token coloured by its trace source, the legend, the stats table."""

from __future__ import annotations

import html
import re

from asymspec_vl.core import trace as T

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
METHOD_NAMES = {
    "asymspec": "AsymSpec",
    "floor": "Floor",
    "drafter": "VL drafter",
    "sd": "SD",
    "scd": "SCD",
}
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
    return (
        f'<span class="tok tok-{html.escape(source, quote=True)}" title="{html.escape(label, quote=True)}" '
        f'style="background:{colour}">{html.escape(text)}</span>'
    )


def chips_html(pieces: list[tuple[str, str]]) -> str:
    """The answer's tokens as chips, one coloured <span class="tok"> per token in order. A token of spaces alone
    (or adding no text) shares the chip of the token after it (of the one before, at the end), so no chip is
    empty; a chip never breaks over two lines, nor do the chips of one word (up to the next chip that starts
    with a space). A token of line breaks stays outside the chips, as the line break."""
    items: list[
        tuple[str, list[tuple[str, str]]]
    ] = []  # ("chip" | "break", [(token text, source), ...])
    pending: list[tuple[str, str]] = []  # space tokens waiting for a chip

    def flush() -> None:
        if pending:
            if items and items[-1][0] == "chip":
                items[-1][1].extend(pending)
            else:
                items.append(("chip", list(pending)))
            pending.clear()

    for text, source in pieces:
        if text.strip():
            items.append(("chip", [*pending, (text, source)]))
            pending.clear()
        elif "\n" in text:
            flush()
            items.append(("break", [(text, source)]))
        else:
            pending.append((text, source))
    flush()
    out, word = [], []

    def end_word() -> None:
        if word:
            out.append(f'<span class="word">{"".join(word)}</span>')
            word.clear()

    for kind, tokens in items:
        spans = "".join(token_span(t, s) for t, s in tokens)
        if kind == "break":
            end_word()
            out.append(spans)
            continue
        if "".join(t for t, _ in tokens)[:1].isspace():
            end_word()
        word.append(f'<span class="chip">{spans}</span>')
    end_word()
    return "".join(out)


def panel_html(
    method: str, pieces: list[tuple[str, str]], status: str, notes: tuple[str, ...] = ()
) -> str:
    """One method's panel: its title, its answer as plain text and as coloured chips (pieces = [(token text,
    trace source)]), the notes that bear on this answer (warnings, next to it) and a status line (waiting,
    decoding, done, stopped, not run)."""
    tokens = chips_html(pieces)
    text = "".join(
        t for t, _ in pieces
    ).strip()  # the answer as plain text, to read (and copy) above its tokens
    body = (
        f'<div class="answer-text">{html.escape(text)}</div><div class="answer-tokens">{tokens}</div>'
        if tokens
        else ""
    )
    return (
        f'<div class="answer answer-{html.escape(method, quote=True)}" data-method="{html.escape(method)}">'
        f'<div class="answer-title"><b>{html.escape(METHOD_TITLES.get(method, method))}</b></div>'
        f'{body}{notes_html(notes)}<div class="answer-status">{html.escape(status)}</div></div>'
    )


def notes_html(notes) -> str:
    """Warnings about an answer (the verifier's view is empty, the toy pair on an image that is no toy scene)."""
    items = "".join(f'<li class="note">{html.escape(n)}</li>' for n in notes)
    return f'<ul class="answer-notes" role="note">{items}</ul>' if items else ""


def settings_html(cfg, caption: str, ocr: str, vocabulary: str = "") -> str:
    """The settings an answer was made with, in one line under its stats, with how it was decoded: greedy, or
    sampled with its temperature, top-p and seed (the seed repeats the answer); vocabulary: the pair's
    SharedVocabulary.line() (one family, or cross-family and what it shares)."""
    view = (
        f"caption {len(caption.strip())} characters, OCR {len(ocr.strip())} characters"
    )
    pair = (
        f' · <span class="vocabulary">pair: {html.escape(vocabulary)}</span>'
        if vocabulary
        else ""
    )
    return (
        f'<div class="settings">Settings used: K={cfg.K} · β={cfg.beta:g} · γ={cfg.gamma:g} · '
        f"gate {html.escape(cfg.gate)} · max new tokens {cfg.max_new_tokens} · {decoding_html(cfg)} · "
        f"verifier's view: {view}{pair}</div>"
    )


def decoding_html(cfg) -> str:
    """ "greedy (temperature 0)", or "sampled: temperature 0.7 · top-p 0.9 · seed 123 (...)"."""
    if not cfg.samples:
        return '<span class="decoding decoding-greedy">greedy (temperature 0)</span>'
    extra = "".join(
        f" · {name} {value:g}"
        for name, value, off in (("top-k", cfg.top_k, 0), ("min-p", cfg.min_p, 0.0))
        if value != off
    )
    seed = (
        "unseeded (not repeatable)"
        if cfg.seed is None
        else f'seed <b class="seed">{cfg.seed}</b> (the same seed and settings repeat this answer)'
    )
    return (
        f'<span class="decoding decoding-sampled">sampled: temperature {cfg.temperature:g} · '
        f"top-p {cfg.top_p:g}{extra} · {seed}</span>"
    )


# Prompts field -> who reads it (core/methods.py: logits a, b, t, q) and what it holds (inputs/prompts.py
# frame_views). δ = a − b: the drafter on x_full minus the drafter on x_comp (the paper's Eq. 1).
PROMPT_TITLES = {
    "x_full": "x_full, read by the VL drafter for AsymSpec's drafts (logits a): the image, the caption and OCR "
    "text (when given) and the question",
    "x_comp": "x_comp, read by the verifier (logits t: AsymSpec and the Floor) and by the VL drafter for "
    "δ = a − b (logits b): the caption and OCR text (when given) and the question, no image",
    "x_question": "x_question, read by the VL drafter alone (the baseline; logits q): the image and the question, "
    "no caption or OCR text",
}


def prompts_html(prompts: dict | None) -> str:
    """The exact prompt each model read, as text; a run of image placeholder tokens is written once with its
    count (the drafter's prompt holds one per image token)."""
    if not prompts:
        return (
            '<p class="prompts-none">The prompts appear here with the first answer.</p>'
        )
    parts = []
    for field, title in PROMPT_TITLES.items():
        if field in prompts:
            text = re.sub(
                r"((<\|[a-z_]+\|>)\2+)",
                lambda m: f"{m.group(2)}×{len(m.group(1)) // len(m.group(2))}",
                prompts[field],
            )
            parts.append(
                f'<h4>{html.escape(title)}</h4><pre class="prompt prompt-{field}">{html.escape(text)}</pre>'
            )
    return "".join(parts)


def message_html(title: str, text: str) -> str:
    """The one message of the page (a refused upload, an empty question ...); "" clears it."""
    return (
        f'<div class="message" role="alert"><b>{html.escape(title)}</b><br>{html.escape(text)}</div>'
        if text
        else ""
    )


def legend_html(sources=(T.DRAFT, T.FUSED, T.BONUS, T.VERIFIER, T.DRAFTER)) -> str:
    """The colour key: one sample chip per source with what it means."""
    items = "".join(
        f"<li>{token_span(SOURCE_STYLES[s][0], s)} {html.escape(LEGEND_HELP[s])}</li>"
        for s in sources
    )
    return f'<ul class="legend" style="list-style:none;padding-left:0;margin:0">{items}</ul>'


def _cell(x: float | int | None, digits: int | None = None) -> str:
    """A figure, or an empty cell where it does not apply to the method."""
    if x is None:
        return ""
    return str(x) if digits is None else f"{x:.{digits}f}"


def stats_row(
    method: str, stats: T.Stats, fused: int, elapsed_s: float | None, status: str
) -> dict:
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


STATS_COLUMNS = (
    "method",
    "tokens",
    "steps",
    "acceptance rate",
    "mean accepted length",
    "δ-fused tokens",
    "tokens/s",
    "× Floor (one run)",
    "status",
)
# Under every table: one short answer per method, timed once without a warm-up, is no speed measurement
ONE_RUN_NOTE = (
    "tokens/s and × Floor: one short answer each, timed once, so they swing from click to click; "
    "`asymspec-vl eval` warms up and times many answers."
)


def _times_floor(row: dict, rows: list[dict]) -> str:
    """tokens/s over the Floor's in the same run ("1.09"), empty for the Floor itself or without its row."""
    floor = next((r["tokens_per_s"] for r in rows if r["method"] == "floor"), None)
    if row["method"] == "floor" or not floor or row["tokens_per_s"] is None:
        return ""
    return f"{row['tokens_per_s'] / floor:.2f}"


def stats_html(rows: list[dict], settings: str = "", note: str = "") -> str:
    """A table with one row per method that has started (none: no table); figures that do not apply are empty.
    settings: settings_html's line, note: why this pair cannot be faster than the Floor, both under it. With a
    note the × Floor cells stay empty (a ratio there is only timing noise); ONE_RUN_NOTE is always under it."""
    if not rows:
        return ""
    head = (
        "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in STATS_COLUMNS) + "</tr>"
    )
    body = "".join(
        f'<tr class="stats-{html.escape(r["method"], quote=True)}">'
        f"<td>{html.escape(METHOD_NAMES.get(r['method'], r['method']))}</td>"
        f"<td>{r['tokens']}</td><td>{r['steps']}</td><td>{_cell(r['acceptance_rate'], 2)}</td>"
        f"<td>{_cell(r['mean_accepted_length'], 2)}</td><td>{_cell(r['fused'])}</td>"
        f"<td>{_cell(r['tokens_per_s'], 1)}</td><td>{'' if note else _times_floor(r, rows)}</td>"
        f"<td>{html.escape(r['status'])}</td>"
        "</tr>"
        for r in rows
    )
    note = "".join(
        f'<div class="speed-note">{html.escape(n)}</div>'
        for n in (ONE_RUN_NOTE, note)
        if n
    )
    return f'<table class="stats">{head}{body}</table>{settings}{note}'
