"""What the page shows for one question: each method's panel (its state and coloured tokens), its stats row and
its full result; how Stop and errors settle it (partial answers marked stopped, panels not reached marked not run)."""

from __future__ import annotations

from dataclasses import dataclass, field

from asymspec_vl.core.trace import FUSED, Stats

from . import render

BASELINES = ("floor", "drafter")
PANELS = ("asymspec", *BASELINES)
# Panel states. The answer ends in DONE (end of answer or token limit), STOPPED (the Stop button) or FAILED.
WAITING, DECODING, DONE, STOPPED, NOT_RUN, FAILED = (
    "waiting",
    "decoding",
    "done",
    "stopped",
    "not run",
    "failed",
)
ENDINGS = {
    "stop": "end of answer",
    "length": "token limit",
}  # GenerationResult.finish_reason -> words
# answer outputs: AsymSpec panel, Floor panel, drafter panel (HTML), stats table (HTML), prompts (HTML),
# results (dict)
Outputs = tuple[str, str, str, str, str, dict]


@dataclass
class Panel:
    method: str
    state: str = WAITING
    pieces: list[tuple[str, str]] = field(
        default_factory=list
    )  # (token text, trace source), end token left out
    fused: int = 0  # δ-fused tokens, the end token included
    stats: Stats | None = None
    elapsed_s: float | None = None  # wall time so far while decoding
    ending: str = ""  # ENDINGS value once DONE
    result: dict | None = None

    def status(self) -> str:
        """The line under the answer."""
        if self.state == DONE:
            return f"done: {self.ending}"
        if self.state == STOPPED:
            n = len(self.pieces)
            return (
                f"stopped after {n} token{'s' if n != 1 else ''}"
                if n
                else "stopped before its first token"
            )
        if self.state == FAILED:
            return "failed: see the message"
        return {WAITING: "waiting…", DECODING: "decoding…", NOT_RUN: "not run"}[
            self.state
        ]


class Board:
    """The panels of one Answer click; `methods` are the ones asked for, in the order they run. A final token in
    `end_ids` ends the answer and is not shown as a token. notes: warnings shown next to the AsymSpec answer;
    settings: render.settings_html's line and speed_note a line on speed, both under the stats."""

    def __init__(
        self,
        methods: list[str],
        end_ids: set[int] = frozenset(),
        notes: tuple[str, ...] = (),
        settings: str = "",
        speed_note: str = "",
    ):
        self.methods, self.end_ids = methods, end_ids
        self.notes, self.settings, self.speed_note = tuple(notes), settings, speed_note
        self.panels = {
            m: Panel(m, WAITING if m in methods else NOT_RUN) for m in PANELS
        }

    @classmethod
    def blank(cls, state: str = NOT_RUN) -> Board:
        """Every panel in one state: WAITING while a new answer starts, NOT_RUN when none will come."""
        board = cls([])
        for panel in board.panels.values():
            panel.state = state
        return board

    def snapshot(
        self,
        method: str,
        ids: list[int],
        pieces: list[str],
        sources: list[str],
        stats: Stats,
        elapsed_s: float,
        text: str,
    ) -> None:
        """text: the answer's text so far as a stream sends it (StreamedText.sent): the tokens shown stop there."""
        self.panels[method] = Panel(
            method,
            DECODING,
            *self._tokens(ids, pieces, sources, text),
            stats,
            elapsed_s,
        )

    def finish(
        self,
        method: str,
        ids: list[int],
        pieces: list[str],
        sources: list[str],
        stats: Stats,
        finish_reason: str,
        result: dict,
        text: str,
    ) -> None:
        """text: the answer's final text (a stop string cuts it inside the tokens: they are shown up to there)."""
        ending = ENDINGS.get(finish_reason, finish_reason)
        self.panels[method] = Panel(
            method,
            DONE,
            *self._tokens(ids, pieces, sources, text),
            stats,
            ending=ending,
            result=result,
        )

    def _tokens(
        self, ids: list[int], pieces: list[str], sources: list[str], text: str
    ) -> tuple[list[tuple[str, str]], int]:
        shown = list(zip(pieces, sources))
        if ids and ids[-1] in self.end_ids:
            shown = shown[:-1]
        return cut(shown, text), sum(s == FUSED for s in sources)

    def settle(self, state: str, running: str | None) -> None:
        """Stop or an error: the `running` panel takes `state` (STOPPED / FAILED), its partial answer kept;
        the panels not reached become NOT_RUN."""
        for panel in self.panels.values():
            if panel.method == running:
                panel.state = state
            elif panel.state in (WAITING, DECODING):
                panel.state = NOT_RUN

    def outputs(self) -> Outputs:
        html = [
            render.panel_html(
                p.method,
                p.pieces,
                p.status(),
                self.notes if p.method == "asymspec" else (),
            )
            for p in (self.panels[m] for m in PANELS)
        ]
        rows = [
            render.stats_row(m, p.stats, p.fused, p.elapsed_s, _stats_status(p))
            for m in self.methods
            for p in [self.panels[m]]
            if p.stats is not None
        ]
        results = {
            m: self.panels[m].result
            for m in self.methods
            if self.panels[m].result is not None
        }
        prompts = next(
            (r.get("prompts") for r in results.values() if r), None
        )  # one request: the same prompts
        return (
            html[0],
            html[1],
            html[2],
            render.stats_html(rows, self.settings, self.speed_note),
            render.prompts_html(prompts),
            results,
        )


def cut(shown: list[tuple[str, str]], text: str) -> list[tuple[str, str]]:
    """The (token text, source) pieces that make `text`: all of them when they join to it, else those up to
    len(text) characters, the last one cut where the text ends (a stop string ended the answer inside it, or a
    stream holds the text a stop string may still cut)."""
    if "".join(piece for piece, _ in shown) == text:
        return shown
    kept, left = [], len(text)
    for piece, source in shown:
        if left <= 0:
            break
        kept.append((piece[:left], source))
        left -= len(piece)
    return kept


def _stats_status(panel: Panel) -> str:
    return {DONE: panel.ending, DECODING: "decoding…"}.get(panel.state, panel.state)
