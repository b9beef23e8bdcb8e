"""Demo pieces without a server: token colouring and escaping, stats rows, streaming, input validation."""

import html
import threading
import time
from html.parser import HTMLParser

import pytest

from asymspec_vl import trace as T
from asymspec_vl.config import AsymSpecConfig
from asymspec_vl.errors import ConfigError, EmptyQuestionError, ImageTooLargeError, InvalidImageError
from asymspec_vl.demo import render
from asymspec_vl.demo.service import DemoService
from asymspec_vl.demo.streaming import Cancelled, Snapshot, stream_generate


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


def test_token_text_is_escaped_and_round_trips():
    pieces = [("<script>alert(1)</script>", T.DRAFT), (" a & b", T.FUSED), ("\n\"x\"", T.BONUS)]
    markup = render.answer_html("asymspec", pieces, status="done <stop>")
    assert "<script>" not in markup and "done &lt;stop&gt;" in markup
    got = spans(markup)
    assert [(c, t) for c, _, t in got] == [(f"tok tok-{s}", text) for text, s in pieces]
    assert [title for _, title, _ in got] == [render.SOURCE_STYLES[s][0] for _, s in pieces]


def test_every_source_has_its_own_colour_and_a_legend_entry():
    colours = [c for _, c in render.SOURCE_STYLES.values()]
    assert set(render.SOURCE_STYLES) == set(T.TOKEN_SOURCES)
    assert len(set(colours)) == len(colours)
    legend = render.legend_html(T.TOKEN_SOURCES)
    assert [c for c, _, _ in spans(legend)] == [f"tok tok-{s}" for s in T.TOKEN_SOURCES]
    for s in T.TOKEN_SOURCES:
        assert html.escape(render.LEGEND_HELP[s]) in legend


def test_stats_rows_follow_the_counters():
    st = T.Stats(steps=4, drafted=8, accepted=6, emitted=10, accepted_at=[4, 2], elapsed_s=2.0)
    row = render.stats_row("asymspec", st, [T.DRAFT] * 6 + [T.FUSED] * 3 + [T.BONUS], finish="stop")
    assert row["acceptance_rate"] == pytest.approx(0.75)
    assert row["mean_accepted_length"] == pytest.approx(2.5)
    assert row["tokens_per_s"] == pytest.approx(5.0)
    assert row["fused"] == 3 and row["tokens"] == 10 and row["finish"] == "stop"
    # while streaming, stats.elapsed_s is 0: the wall time so far is used
    live = render.stats_row("asymspec", T.Stats(steps=1, drafted=2, accepted=1, emitted=2), [], elapsed_s=0.5)
    assert live["tokens_per_s"] == pytest.approx(4.0)
    # no drafts (Floor, drafter alone): acceptance is not a number, shown as a dash
    floor = render.stats_row("floor", T.Stats(steps=3, emitted=3, elapsed_s=1.0), [T.VERIFIER] * 3)
    assert floor["acceptance_rate"] is None
    table = render.stats_html([row, floor])
    assert "<td>0.75</td>" in table and "<td>2.50</td>" in table and "<td>5.0</td>" in table
    assert '<tr class="stats-floor"><td>Floor</td><td>3</td><td>3</td><td>–</td>' in table


class FakeVL:
    """Stands in for AsymSpecVL.generate: calls on_step `steps` times, then returns `result` (or raises)."""

    def __init__(self, steps=5, result="RESULT", error=None, delay=0.0):
        self.steps, self.result, self.error, self.delay = steps, result, error, delay
        self.stopped_at = None

    def generate(self, on_step=None, **kwargs):
        from asymspec_vl.loop import RowOutput

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
    items = list(stream_generate(FakeVL(steps=5, delay=0.01), threading.Lock(), question="q"))
    snaps, last = items[:-1], items[-1]
    assert last == "RESULT" and snaps and all(isinstance(s, Snapshot) for s in snaps)
    lengths = [len(s.token_ids) for s in snaps]
    assert lengths == sorted(lengths) and lengths[-1] == 5
    assert snaps[-1].stats.steps == 5 and snaps[-1].token_ids == [0, 1, 2, 3, 4]


def test_stream_reraises_the_generation_error():
    with pytest.raises(EmptyQuestionError, match="empty"):
        list(stream_generate(FakeVL(steps=2, error=EmptyQuestionError("the question is empty")), threading.Lock()))


def test_closing_the_stream_stops_the_decoding_and_frees_the_lock():
    vl, lock = FakeVL(steps=10_000, delay=0.001), threading.Lock()
    it = stream_generate(vl, lock)
    next(it)
    it.close()
    assert lock.acquire(timeout=10), "the worker still holds the model lock"
    lock.release()
    assert vl.stopped_at is not None and vl.stopped_at < 10_000


class NoModels:
    """An AsymSpecVL that must not be reached: validation happens before any model runs."""

    names = {}

    def generate(self, **kwargs):
        raise AssertionError("a model ran on invalid input")


@pytest.fixture
def service(tmp_path):
    return DemoService(NoModels(), AsymSpecConfig(), max_image_pixels=100 * 100, max_file_bytes=20_000)


def _png(path, size):
    from PIL import Image

    Image.new("RGB", size, "white").save(path)
    return str(path)


@pytest.mark.parametrize("args, error, match", [
    (dict(K=0), ConfigError, "K"),
    (dict(K=2.5), ConfigError, "integer"),
    (dict(gamma=0.0), ConfigError, "gamma"),
    (dict(gate="nope"), ConfigError, "gate"),
    (dict(max_new_tokens=None), ConfigError, "max_new_tokens"),
    (dict(question="   "), EmptyQuestionError, "question is empty"),
    (dict(baselines=["sd"]), ConfigError, "baseline"),
    (dict(image=None), InvalidImageError, "upload an image"),
    (dict(image="big"), ImageTooLargeError, "pixels"),
    (dict(image="text"), InvalidImageError, "not an image"),
])
def test_bad_inputs_raise_typed_errors_before_any_model_runs(service, tmp_path, args, error, match):
    images = {"ok": _png(tmp_path / "ok.png", (50, 40)), "big": _png(tmp_path / "big.png", (101, 100)),
              "text": str(tmp_path / "text.png")}
    (tmp_path / "text.png").write_text("not a picture")
    kw = dict(image="ok", question="What is shown?", caption="", ocr="", K=2, beta=1.0, gamma=0.5, gate="cda",
              max_new_tokens=8, baselines=["floor"])
    kw.update(args)
    kw["image"] = images.get(kw["image"], kw["image"])
    with pytest.raises(error, match=match):
        next(service.answer(**kw))


def test_file_size_limit_and_describe_without_a_captioner(service, tmp_path):
    noisy = tmp_path / "noisy.bmp"
    from PIL import Image

    Image.new("RGB", (90, 90), "red").save(noisy)  # BMP: 24 KB > the 20 KB limit
    with pytest.raises(ImageTooLargeError, match="bytes"):
        service.load(str(noisy))
    assert service.describe_image(_png(tmp_path / "x.png", (10, 10))) == ("", "")
