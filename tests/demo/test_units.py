"""Demo pieces without a server: token colouring and escaping, stats rows, the board's states, streaming, Stop
signals, input validation."""

import html
import threading
import time
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from asymspec_vl.demo import render
from asymspec_vl.demo.board import DONE, FAILED, NOT_RUN, STOPPED, Board
from asymspec_vl.demo.service import DemoService, StopSignals
from asymspec_vl.demo.streaming import Cancelled, Snapshot, stream_generate

from asymspec_vl.core import trace as T
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import (
    ConfigError,
    EmptyQuestionError,
    ImageTooLargeError,
    InvalidImageError,
)


class Spans(HTMLParser):
    """(classes, title, text) of every <span class="tok ...">."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.spans, self._open = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and "tok" in (a.get("class") or "").split():
            self._open = [a["class"], a.get("title"), ""]

    def handle_data(self, data):
        if self._open is not None:
            self._open[2] += data

    def handle_endtag(self, tag):
        if tag == "span" and self._open is not None:
            self.spans.append(tuple(self._open))
            self._open = None


def spans(markup: str):
    p = Spans()
    p.feed(markup)
    return p.spans


def stopped_after(n: int) -> str:
    """A stopped panel's status line."""
    return f"stopped after {n} token" if n == 1 else f"stopped after {n} tokens"


def test_token_text_is_escaped_and_round_trips():
    pieces = [
        ("<script>alert(1)</script>", T.DRAFT),
        (" a & b", T.FUSED),
        ('\n"x"', T.BONUS),
    ]
    markup = render.panel_html("asymspec", pieces, status="done <stop>")
    assert "<script>" not in markup and "done &lt;stop&gt;" in markup
    got = spans(markup)
    assert [(c, t) for c, _, t in got] == [(f"tok tok-{s}", text) for text, s in pieces]
    assert [title for _, title, _ in got] == [
        render.SOURCE_STYLES[s][0] for _, s in pieces
    ]


def test_every_source_has_its_own_colour_and_a_legend_entry():
    colours = [c for _, c in render.SOURCE_STYLES.values()]
    assert set(render.SOURCE_STYLES) == set(T.TOKEN_SOURCES)
    assert len(set(colours)) == len(colours)
    legend = render.legend_html(T.TOKEN_SOURCES)
    assert [c for c, _, _ in spans(legend)] == [f"tok tok-{s}" for s in T.TOKEN_SOURCES]
    for s in T.TOKEN_SOURCES:
        assert html.escape(render.LEGEND_HELP[s]) in legend


def test_stats_rows_show_only_what_applies_to_each_method():
    st = T.Stats(
        steps=4, drafted=8, accepted=6, emitted=10, accepted_at=[4, 2], elapsed_s=2.0
    )
    row = render.stats_row("asymspec", st, 3, None, "end of answer")
    assert row["acceptance_rate"] == pytest.approx(0.75)
    assert row["mean_accepted_length"] == pytest.approx(2.5)
    assert row["tokens_per_s"] == pytest.approx(5.0)
    assert (
        row["fused"] == 3 and row["tokens"] == 10 and row["status"] == "end of answer"
    )
    # while streaming, stats.elapsed_s is 0: the wall time so far is used
    live = render.stats_row(
        "asymspec",
        T.Stats(steps=1, drafted=2, accepted=1, emitted=2),
        0,
        0.5,
        "decoding…",
    )
    assert live["tokens_per_s"] == pytest.approx(4.0)
    # no drafts (Floor, drafter alone): no acceptance rate, no mean accepted length, no δ-fused count
    floor = render.stats_row(
        "floor", T.Stats(steps=3, emitted=3, elapsed_s=1.0), 0, None, "token limit"
    )
    assert (
        floor["acceptance_rate"]
        is floor["mean_accepted_length"]
        is floor["fused"]
        is None
    )
    # SD drafts (acceptance applies) but never fuses
    sd = render.stats_row(
        "sd",
        T.Stats(steps=2, drafted=4, accepted=2, emitted=4, elapsed_s=1.0),
        0,
        None,
        "",
    )
    assert sd["acceptance_rate"] == pytest.approx(0.5) and sd["fused"] is None
    table = render.stats_html([row, floor])
    assert (
        "<td>0.75</td>" in table
        and "<td>2.50</td>" in table
        and "<td>5.0</td>" in table
    )
    assert (
        '<tr class="stats-floor"><td>Floor</td><td>3</td><td>3</td><td></td><td></td><td></td><td>3.0</td>'
        "<td></td><td>token limit</td></tr>" in table
    )
    assert (
        "<td>5.0</td><td>1.67</td>" in table
    )  # AsymSpec's tokens/s over the Floor's: 5.0 / 3.0
    assert (
        "finish" not in table and "stop" not in table
    )  # the end of the text is not called "stop"


def _panel_text(markup: str) -> tuple[str, str]:
    """(the answer's token texts joined, the status line) of a panel."""
    return "".join(t for _, _, t in spans(markup)), markup.split(
        'class="answer-status">'
    )[1].split("</div>")[0]


def test_board_shows_the_end_token_as_the_status_not_as_a_token():
    board = Board(["asymspec", "floor"], end_ids={9})
    board.snapshot(
        "asymspec",
        [1, 2],
        ["a", "b"],
        [T.DRAFT, T.FUSED],
        T.Stats(steps=1, drafted=2, emitted=2),
        0.5,
        "ab",
    )
    asym, floor, drafter, table, _, results = board.outputs()
    assert (
        _panel_text(asym) == ("ab", "decoding…") and _panel_text(floor)[1] == "waiting…"
    )
    assert (
        _panel_text(drafter)[1] == "not run"
        and "stats-floor" not in table
        and results == {}
    )
    stats = T.Stats(steps=2, drafted=4, emitted=3, elapsed_s=1.0)
    board.finish(
        "asymspec",
        [1, 2, 9],
        ["a", "b", "<|im_end|>"],
        [T.DRAFT, T.FUSED, T.FUSED],
        stats,
        "stop",
        {"text": "ab"},
        "ab",
    )
    board.finish(
        "floor",
        [5, 6],
        ["c", "d"],
        [T.VERIFIER] * 2,
        T.Stats(steps=2, emitted=2, elapsed_s=1.0),
        "length",
        {"text": "cd"},
        "cd",
    )
    asym, floor, _, table, _, results = board.outputs()
    assert _panel_text(asym) == ("ab", "done: end of answer") and "im_end" not in asym
    assert _panel_text(floor) == ("cd", "done: token limit")
    assert (
        "<td>2</td><td>" in table.split('class="stats-asymspec"')[1]
    )  # both fused tokens counted, the end's too
    assert (
        set(results) == {"asymspec", "floor"} and board.panels["asymspec"].state == DONE
    )


def test_stop_keeps_the_partial_answer_and_marks_the_rest_not_run():
    board = Board(["asymspec", "floor", "drafter"])
    board.finish(
        "asymspec",
        [1],
        ["a"],
        [T.BONUS],
        T.Stats(steps=1, emitted=1, elapsed_s=1.0),
        "length",
        {},
        "a",
    )
    board.snapshot(
        "floor",
        [1, 2],
        ["x", "y"],
        [T.VERIFIER] * 2,
        T.Stats(steps=2, emitted=2),
        1.0,
        "xy",
    )
    board.settle(STOPPED, "floor")
    asym, floor, drafter, table, *_ = board.outputs()
    assert _panel_text(asym) == ("a", "done: token limit")
    assert (
        _panel_text(floor) == ("xy", "stopped after 2 tokens")
        and _panel_text(drafter)[1] == "not run"
    )
    single = Board(["floor"])
    single.snapshot(
        "floor", [1], ["x"], [T.VERIFIER], T.Stats(steps=1, emitted=1), 1.0, "x"
    )
    single.settle(STOPPED, "floor")
    assert _panel_text(single.outputs()[1])[1] == "stopped after 1 token"
    assert "<td>stopped</td>" in table.split('class="stats-floor"')[1]
    assert [board.panels[m].state for m in ("asymspec", "floor", "drafter")] == [
        DONE,
        STOPPED,
        NOT_RUN,
    ]
    before = Board(["asymspec"])
    before.settle(STOPPED, None)  # Stop before the first panel started
    assert _panel_text(before.outputs()[0])[1] == "not run"


def test_an_error_marks_the_running_panel_failed():
    board = Board(["asymspec", "floor"])
    board.settle(FAILED, "asymspec")
    asym, floor, *_ = board.outputs()
    assert (
        _panel_text(asym)[1] == "failed: see the message"
        and _panel_text(floor)[1] == "not run"
    )


def test_stop_signals_belong_to_one_session_and_one_answer():
    signals = StopSignals()
    signals.stop("a")  # nothing armed: nothing happens
    first = signals.arm("a")
    other = signals.arm("b")
    signals.stop("a")
    assert first.is_set() and not other.is_set()
    second = signals.arm("a")  # a new Answer click: a fresh signal
    assert not second.is_set() and signals.current("a") is second
    signals.release(
        "a", first
    )  # the old answer ending does not drop the new one's signal
    assert signals.current("a") is second
    signals.release("a", second)
    assert signals.current("a") is None


class FakeVL:
    """Stands in for AsymSpecVL.generate: calls on_step `steps` times, then returns `result` (or raises)."""

    def __init__(self, steps=5, result="RESULT", error=None, delay=0.0):
        self.steps, self.result, self.error, self.delay = steps, result, error, delay
        self.stopped_at = None

    def generate(self, on_step=None, **kwargs):
        from asymspec_vl.core.loop import RowOutput

        row = RowOutput(stats=T.Stats(accepted_at=[0]))
        for i in range(self.steps):
            row.token_ids.append(i)
            row.sources.append(T.DRAFT)
            row.stats.steps += 1
            try:
                on_step([row])
            except Cancelled:
                self.stopped_at = i
                raise
            time.sleep(self.delay)
        if self.error:
            raise self.error
        return self.result


def test_stream_yields_growing_snapshots_then_the_result():
    items = list(
        stream_generate(FakeVL(steps=5, delay=0.01), threading.Lock(), question="q")
    )
    snaps, last = items[:-1], items[-1]
    assert last == "RESULT" and snaps and all(isinstance(s, Snapshot) for s in snaps)
    lengths = [len(s.token_ids) for s in snaps]
    assert lengths == sorted(lengths) and lengths[-1] == 5
    assert snaps[-1].stats.steps == 5 and snaps[-1].token_ids == [0, 1, 2, 3, 4]


def test_stream_reraises_the_generation_error():
    with pytest.raises(EmptyQuestionError, match="empty"):
        list(
            stream_generate(
                FakeVL(steps=2, error=EmptyQuestionError("the question is empty")),
                threading.Lock(),
            )
        )


def test_closing_the_stream_stops_the_decoding_and_frees_the_lock():
    vl, lock = FakeVL(steps=10_000, delay=0.001), threading.Lock()
    it = stream_generate(vl, lock)
    next(it)
    it.close()
    assert lock.acquire(timeout=10), "the worker still holds the model lock"
    lock.release()
    assert vl.stopped_at is not None and vl.stopped_at < 10_000


class StopAt(FakeVL):
    """Sets `stop` from inside the decoding after `at` steps: no timing involved."""

    def __init__(self, stop: threading.Event, at: int):
        super().__init__(steps=100)
        self.stop, self.at = stop, at

    def generate(self, on_step=None, **kwargs):
        def step(rows):
            on_step(rows)
            if len(rows[0].token_ids) == self.at:
                self.stop.set()

        return super().generate(on_step=step, **kwargs)


def test_setting_stop_ends_the_stream_with_cancelled_after_the_last_step():
    stop = threading.Event()
    vl = StopAt(stop, at=3)
    seen = []
    with pytest.raises(Cancelled):
        for snap in stream_generate(vl, threading.Lock(), stop):
            seen.append(snap.token_ids)
    assert vl.stopped_at == 3 and seen[-1] == [
        0,
        1,
        2,
    ]  # the newest snapshot arrives before the Cancelled


class NoModels:
    """An AsymSpecVL that must not be reached: validation happens before any model runs."""

    names = {}

    def generate(self, **kwargs):
        raise AssertionError("a model ran on invalid input")


@pytest.fixture
def service(tmp_path):
    return DemoService(
        NoModels(),
        AsymSpecConfig(),
        max_image_pixels=100 * 100,
        max_file_bytes=20_000,
        upload_folders=[tmp_path],
    )  # these tests' files stand for uploads


def _png(path, size):
    from PIL import Image

    Image.new("RGB", size, "white").save(path)
    return str(path)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (dict(K=0), ConfigError, "K"),
        (dict(K=2.5), ConfigError, "integer"),
        (dict(gamma=0.0), ConfigError, "gamma"),
        (dict(gate="nope"), ConfigError, "gate"),
        (dict(max_new_tokens=None), ConfigError, "max_new_tokens"),
        (
            dict(temperature=-0.5),
            ConfigError,
            r"temperature=-0.5 is invalid: expected a number in \[0, 100\]",
        ),
        (dict(temperature="hot"), ConfigError, "temperature='hot' is invalid"),
        (dict(temperature=0.7, top_p=1.5), ConfigError, "top_p=1.5 is invalid"),
        (
            dict(temperature=0.7, seed=0.5),
            ConfigError,
            "seed=0.5 is invalid: expected an integer",
        ),
        (
            dict(temperature=0.7, seed="0.5"),
            ConfigError,
            "seed=0.5 is invalid: expected an integer",
        ),  # the text box
        (
            dict(temperature=0.7, seed="lucky"),
            ConfigError,
            "seed='lucky' is invalid: expected an integer",
        ),
        (dict(question="   "), EmptyQuestionError, "question is empty"),
        (dict(baselines=["sd"]), ConfigError, "baseline"),
        (dict(image=None), InvalidImageError, "no image yet: upload one"),
        (
            dict(image="big"),
            ImageTooLargeError,
            "big.png is 101×100 = 10,100 pixels; this demo accepts up to 10,000",
        ),
        (dict(image="text"), InvalidImageError, "text.png cannot be read as an image"),
    ],
)
def test_bad_inputs_raise_typed_errors_before_any_model_runs(
    service, tmp_path, args, error, match
):
    images = {
        "ok": _png(tmp_path / "ok.png", (50, 40)),
        "big": _png(tmp_path / "big.png", (101, 100)),
        "text": str(tmp_path / "text.png"),
    }
    (tmp_path / "text.png").write_text("not a picture")
    kw = dict(
        image="ok",
        question="What is shown?",
        caption="",
        ocr="",
        K=2,
        beta=1.0,
        gamma=0.5,
        gate="cda",
        max_new_tokens=8,
        baselines=["floor"],
    )
    kw.update(args)
    kw["image"] = images.get(kw["image"], kw["image"])
    with pytest.raises(error, match=match):
        next(service.answer(**kw))


def test_file_size_limit_and_describe_without_a_captioner(service, tmp_path):
    noisy = tmp_path / "noisy.bmp"
    from PIL import Image

    Image.new("RGB", (90, 90), "red").save(noisy)  # BMP: 24 KB > the 20 KB limit
    with pytest.raises(
        ImageTooLargeError,
        match="noisy.bmp is 0.* MB; this demo accepts image files up to ",
    ):
        service.load(str(noisy))
    assert service.describe_image(_png(tmp_path / "x.png", (10, 10))) == ("", "")


def test_a_panel_shows_the_answer_as_plain_text_above_its_tokens():
    markup = render.panel_html(
        "asymspec", [("9", "draft"), (" ×", "draft"), (" <b>", "fused")], "done"
    )
    assert (
        '<div class="answer-text">9 × &lt;b&gt;</div><div class="answer-tokens">'
        in markup
    )
    assert "answer-text" not in render.panel_html(
        "floor", [], "waiting…"
    )  # nothing to read yet


def test_stop_signals_of_sessions_that_never_answer_are_bounded_and_a_closed_session_drops_its_own():
    signals = StopSignals(capacity=8)
    for i in range(
        10_000
    ):  # a flood of sessions that click Answer and never reach their answer
        signals.arm(f"s{i}")
    assert (
        len(signals) == 8
        and signals.current("s9999") is not None
        and signals.current("s0") is None
    )
    queued = signals.arm("tab")
    signals.drop(
        "tab"
    )  # the tab closed: its signal goes, and an answer still queued for it stops
    assert signals.current("tab") is None and queued.is_set()
    signals.drop("never-seen")  # nothing armed: nothing happens


def test_the_page_bounds_gradios_sessions_and_releases_a_closed_sessions_signal():
    import socket

    from asymspec_vl.demo.page import build_demo, launch
    from asymspec_vl.demo.service import SESSIONS_KEPT

    service = DemoService(NoModels(), AsymSpecConfig())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(build_demo(service), port=port, block=False, quiet=True)
    try:
        assert (
            demo.state_session_capacity == SESSIONS_KEPT < 10_000
        )  # Gradio's default: 10,000
        unload = [
            d for d in demo.fns.values() if any(t[1] == "unload" for t in d.targets)
        ]
        assert len(unload) == 1
        service.stops.arm("tab")
        unload[0].fn(SimpleNamespace(session_hash="tab"))
        assert service.stops.current("tab") is None
    finally:
        demo.close()


class Chips(HTMLParser):
    """The chips of an answer: per chip the texts of its tokens, and per word its chips."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.words, self.chips, self._stack = [], [], []

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        self._stack.append(cls)
        if cls == "word":
            self.words.append([])
        elif cls == "chip":
            self.chips.append([])
            self.words[-1].append(self.chips[-1])
        elif "tok" in cls.split() and "chip" in self._stack:
            self.chips[-1].append("")

    def handle_data(self, data):
        if self._stack and "tok" in self._stack[-1].split() and "chip" in self._stack:
            self.chips[-1][-1] += data

    def handle_endtag(self, tag):
        self._stack.pop()


def test_space_tokens_share_the_next_chip_and_words_stay_whole():
    pieces = [
        ("9", T.DRAFT),
        (" ", T.DRAFT),
        ("×", T.DRAFT),
        (" ", T.FUSED),
        ("1", T.DRAFT),
        ("4", T.BONUS),
        ("", T.DRAFT),
        (" The", T.DRAFT),
        ("\n", T.DRAFT),
        ("x", T.DRAFT),
        (" ", T.BONUS),
    ]
    markup = render.panel_html("asymspec", pieces, "done")
    p = Chips()
    p.feed(markup)
    assert all("".join(chip).strip() for chip in p.chips)  # no chip without text
    assert p.chips == [["9"], [" ", "×"], [" ", "1"], ["4"], ["", " The"], ["x", " "]]
    assert [["".join(c) for c in w] for w in p.words] == [
        ["9"],
        [" ×"],
        [" 1", "4"],
        [" The"],
        ["x "],
    ]
    # every token keeps its own span, colour and tooltip, in order
    assert [(c, t) for c, _, t in spans(markup)] == [
        (f"tok tok-{s}", t) for t, s in pieces
    ]


def test_the_settings_and_the_speed_note_are_shown_with_the_stats():
    row = render.stats_row(
        "asymspec",
        T.Stats(steps=1, drafted=2, accepted=1, emitted=2, elapsed_s=1.0),
        0,
        None,
        "done",
    )
    cfg = AsymSpecConfig(K=3, beta=1.5, gamma=0.25, gate="cda", max_new_tokens=40)
    table = render.stats_html(
        [row], render.settings_html(cfg, "a caption", ""), "no speed-up here"
    )
    text = html.unescape(table)
    assert "Settings used: K=3 · β=1.5 · γ=0.25 · gate cda · max new tokens 40" in text
    assert (
        "caption 9 characters, OCR 0 characters" in text and "no speed-up here" in text
    )
    assert (
        "timed once" in text
    )  # one short answer is no speed measurement: the table says so


def test_times_floor_only_where_the_pair_can_beat_the_floor():
    """× Floor is one noisy run: shown (and labelled so) on a pair that can beat the Floor, empty with the note
    that this pair cannot."""
    rows = [
        render.stats_row(m, T.Stats(steps=2, emitted=4, elapsed_s=s), 0, None, "done")
        for m, s in (("asymspec", 1.0), ("floor", 2.0))
    ]

    def cells(table):
        return [
            c.split("</td>")[0]
            for c in table.split('class="stats-asymspec">')[1].split("<td>")[1:]
        ]

    assert cells(render.stats_html(rows))[
        7
    ] == "2.00" and "× Floor (one run)" in render.stats_html(rows)
    assert (
        cells(render.stats_html(rows, note="the drafter costs what the verifier does"))[
            7
        ]
        == ""
    )


def test_notes_sit_in_the_asymspec_panel_only():
    board = Board(["asymspec", "floor"], notes=("The verifier's view is empty <x>",))
    board.snapshot(
        "asymspec",
        [1],
        ["a"],
        [T.DRAFT],
        T.Stats(steps=1, drafted=1, emitted=1),
        0.1,
        "a",
    )
    asym, floor, *_ = board.outputs()
    assert (
        'class="answer-notes"' in asym
        and "The verifier&#x27;s view is empty &lt;x&gt;" in asym
    )
    assert "answer-notes" not in floor


def test_the_prompts_are_text_with_image_placeholders_counted():
    prompts = {
        "x_full": "<|vision_start|>" + "<|image_pad|>" * 48 + "<|vision_end|>Q?",
        "x_comp": "cap <b>",
        "x_question": "Q?",
    }
    markup = render.prompts_html(prompts)
    assert (
        "&lt;|image_pad|&gt;×48&lt;|vision_end|&gt;Q?" in markup
        and "cap &lt;b&gt;" in markup
    )
    assert markup.index("x_full") < markup.index("x_comp") < markup.index("x_question")
    assert "appear here" in render.prompts_html(None)


def test_warnings_for_an_empty_view_and_the_toy_pair_on_a_chart():
    from PIL import Image

    service = DemoService(NoModels(), AsymSpecConfig())
    chart, scene = Image.new("RGB", (256, 192)), Image.new("RGB", (96, 32))
    assert (
        service.notes(chart, "a chart", "") == ()
    )  # not the toy pair: no claim about the image
    assert "verifier's view is empty" in service.notes(chart, " ", "")[0]
    service.toy = True
    assert "no toy scene (256×192)" in service.notes(chart, "a chart", "")[0]
    assert service.notes(scene, "three shapes", "") == ()


def test_the_toy_pair_is_known_from_its_names():
    toy = SimpleNamespace(
        names={"drafter": "embedded", "verifier": "embedded", "backend": "hf"}
    )
    assert DemoService(toy, AsymSpecConfig()).toy
    assert not DemoService(
        SimpleNamespace(names={"drafter": "a", "verifier": "b"}), AsymSpecConfig()
    ).toy


def test_the_api_names_every_output():
    from asymspec_vl.demo.page import build_demo

    demo = build_demo(
        DemoService(
            SimpleNamespace(names={"drafter": "embedded", "verifier": "embedded"}),
            AsymSpecConfig(),
        )
    )
    info = demo.get_api_info()["named_endpoints"]
    assert [r["label"] for r in info["/answer"]["returns"]] == [
        "AsymSpec answer",
        "Floor answer",
        "VL drafter answer",
        "Stats",
        "Prompts",
        "Results",
    ]
    assert [r["label"] for r in info["/describe"]["returns"]] == ["Caption", "OCR text"]


def test_a_click_on_an_example_runs_the_answer():
    """The examples' load event is followed by the same begin → answer chain as the Answer button."""
    from asymspec_vl.demo.page import build_demo

    demo = build_demo(
        DemoService(
            SimpleNamespace(names={"drafter": "embedded", "verifier": "embedded"}),
            AsymSpecConfig(),
        )
    )
    deps = demo.config["dependencies"]
    by_name = {d["api_name"]: d for d in deps}
    load = next(d for d in deps if d["api_name"] == "load_example")
    begin, answer = by_name["page_example_begin"], by_name["page_example_answer"]
    assert (
        begin["trigger_after"] == load["id"] and answer["trigger_after"] == begin["id"]
    )
    assert [demo.fns[d["id"]].fn.__name__ for d in (begin, answer)] == [
        "begin",
        "answer",
    ]


def test_the_decoding_controls_hold_temperature_top_p_and_seed():
    """The page's and the API's answers read the temperature slider (0..2, default 0: greedy), the top-p slider
    and the seed box (empty: a random seed), after the baselines; the command line's values are their defaults."""
    from asymspec_vl.demo.page import build_demo

    names = SimpleNamespace(names={"drafter": "embedded", "verifier": "embedded"})
    for base, shown in (
        (AsymSpecConfig(), (0.0, 1.0, "")),
        (AsymSpecConfig(temperature=0.6, top_p=0.9, seed=4), (0.6, 0.9, "4")),
    ):  # the seed box: text, empty
        demo = build_demo(DemoService(names, base))
        blocks = {c["id"]: c for c in demo.config["components"]}
        for api in ("answer", "page_answer", "page_example_answer"):
            dep = next(d for d in demo.config["dependencies"] if d["api_name"] == api)
            last = [blocks[i]["props"] for i in dep["inputs"][-4:]]
            assert [p["elem_id"] for p in last] == [
                "baselines",
                "temperature",
                "top-p",
                "seed",
            ]
            assert tuple(p.get("value") for p in last[1:]) == shown
        temperature = next(
            c["props"]
            for c in blocks.values()
            if c["props"].get("elem_id") == "temperature"
        )
        assert (temperature["minimum"], temperature["maximum"]) == (0, 2)


def test_no_speed_note_where_the_backend_holds_model_names_not_models():
    """The vLLM backend's drafter and verifier are the names its engines load: the speed note (which counts
    parameters) is empty there, not an AttributeError on every answer."""
    vllm_like = SimpleNamespace(
        names={"drafter": "embedded", "verifier": "embedded"},
        backend=SimpleNamespace(drafter="/models/vl", verifier="/models/llm"),
    )
    assert DemoService(vllm_like, AsymSpecConfig()).speed_note(2) == ""
