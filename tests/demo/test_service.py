"""The demo's answer stream on the tiny models, without a server: Stop mid-answer and between panels settles the
page (partial answer kept, the rest not run), an error mid-way marks its panel failed, the page's handlers turn
every error into one message and clear stale answers, and each upload is decoded once."""

import html
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from asymspec_vl.demo.handlers import Handlers
from asymspec_vl.demo.service import DemoService
from asymspec_vl.demo.uploads import Upload
from PIL import Image

from asymspec_vl import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError
from tests.demo.test_units import spans, stopped_after

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CHART = Path(__file__).resolve().parents[2] / "demo" / "examples" / "chart.png"
QUESTION, CAPTION = (
    "What is the value of the tallest bar?",
    "A bar chart of sales per year.",
)
SETTINGS = dict(K=2, beta=1.0, gamma=0.5, gate="cda", max_new_tokens=12)
GREEDY = (
    0.0,
    1.0,
    None,
)  # the page's temperature, top-p and seed controls at their defaults


class Interrupting:
    """The pipeline, with an action run inside the decoding of `method` after its `at`-th step (at=0: when
    its generate call returns): a Stop click or a failure at an exact point, no timing involved."""

    def __init__(self, vl, method: str, at: int, action):
        self.vl, self.method, self.at, self.action = vl, method, at, action
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.vl, name)

    def generate(self, on_step=None, **kwargs):
        self.calls.append(kwargs["method"])
        steps = []

        def step(rows):
            on_step(rows)
            steps.append(1)
            if kwargs["method"] == self.method and len(steps) == self.at:
                self.action()

        result = self.vl.generate(on_step=step, **kwargs)
        if kwargs["method"] == self.method and self.at == 0:
            self.action()
        return result


def _answer(vl, stop=None):
    service = DemoService(vl, AsymSpecConfig())
    return list(
        service.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor", "drafter"],
            stop=stop,
        )
    ), service


def _status(markup: str) -> str:
    return markup.split('class="answer-status">')[1].split("</div>")[0]


def test_stop_mid_answer_keeps_the_partial_answer(tiny_vl):
    stop = threading.Event()
    vl = Interrupting(tiny_vl, "asymspec", at=2, action=stop.set)
    frames, service = _answer(vl, stop)
    asym, floor, drafter, table, _, results = frames[-1]
    ref = tiny_vl.generate(
        str(CHART),
        QUESTION,
        caption=CAPTION,
        method="asymspec",
        config=AsymSpecConfig(**SETTINGS),
    )
    shown = [t for _, _, t in spans(asym)]
    assert 0 < len(shown) < len(ref.trace) and shown == [
        t.text for t in ref.trace[: len(shown)]
    ]
    assert _status(asym) == stopped_after(len(shown))
    assert _status(floor) == _status(drafter) == "not run" and vl.calls == ["asymspec"]
    assert "<td>stopped</td>" in table and results == {}
    assert 'class="error' not in asym + floor + drafter


def test_stop_after_the_first_panel(tiny_vl):
    stop = threading.Event()
    frames, _ = _answer(Interrupting(tiny_vl, "asymspec", at=0, action=stop.set), stop)
    asym, floor, drafter, table, _, results = frames[-1]
    assert _status(asym).startswith("done: ") and set(results) == {"asymspec"}
    assert (
        _status(floor) == _status(drafter) == "not run" and "stats-floor" not in table
    )
    stop.clear()
    frames, _ = _answer(Interrupting(tiny_vl, "floor", at=1, action=stop.set), stop)
    asym, floor, drafter, _, _, results = frames[-1]
    assert _status(asym).startswith("done: ") and _status(floor) == stopped_after(
        len(spans(floor))
    )
    assert (
        len(spans(floor)) >= 1
        and _status(drafter) == "not run"
        and set(results) == {"asymspec"}
    )


def test_stop_while_waiting_in_the_queue_runs_nothing(tiny_vl):
    stop = threading.Event()
    stop.set()  # Stop clicked before this answer left the queue
    vl = Interrupting(tiny_vl, "asymspec", at=99, action=None)
    frames, _ = _answer(vl, stop)
    assert vl.calls == [] and all(_status(p) == "not run" for p in frames[-1][:3])


class Broken(RuntimeError):
    pass


def test_an_error_mid_way_marks_its_panel_failed_and_propagates(tiny_vl):
    def fail():
        raise Broken("the GPU fell off")

    service = DemoService(
        Interrupting(tiny_vl, "floor", at=1, action=fail), AsymSpecConfig()
    )
    frames = []
    with pytest.raises(Broken):
        for frame in service.answer(
            str(CHART), QUESTION, CAPTION, "", *SETTINGS.values(), ["floor", "drafter"]
        ):
            frames.append(frame)
    asym, floor, drafter, _, _, results = frames[-1]
    assert (
        _status(asym).startswith("done: ")
        and _status(floor) == "failed: see the message"
    )
    assert _status(drafter) == "not run" and set(results) == {"asymspec"}


def test_the_page_handlers_show_one_message_and_no_stale_answer(tiny_vl, tmp_path):
    handlers = Handlers(
        DemoService(
            tiny_vl,
            AsymSpecConfig(),
            max_image_pixels=100_000,
            upload_folders=[tmp_path, CHART.parent],
        )
    )
    request = SimpleNamespace(session_hash="s1")
    begin = handlers.begin(request)
    assert begin[0] == "" and all(
        "waiting…" in p for p in begin[1:4]
    )  # stale answers go at once
    assert begin[-1]["interactive"] is False  # Answer is off while this one runs

    out = list(
        handlers.answer(
            str(CHART),
            "  ",
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor"],
            *GREEDY,
            request,
        )
    )
    assert len(out) == 1
    message, asym, floor, drafter, table, _, results, button = out[0]
    assert "There is no question" in message and "type a question" in message
    assert all(_status(p) == "not run" and not spans(p) for p in (asym, floor, drafter))
    assert results == {} and button["interactive"] is True

    wide = tmp_path / "wide.png"
    Image.new("RGB", (400, 300)).save(wide)
    image, caption, ocr, message, *panels, refused = handlers.describe(
        Upload(str(wide), "wide.png"), request
    )
    assert (
        image is None and caption == ocr == "" and refused is True
    )  # the refused file leaves the image box
    assert (
        "The image is too large" in message
        and "wide.png is 400×300 = 120,000 pixels" in message
    )
    assert all("no answer yet" in p for p in panels[:3])
    kept = handlers.removed(
        None, True, request
    )  # the box emptied by that refusal: its message stays
    assert kept[0] == {"__type__": "update"} and kept[-1] is False
    cleared = handlers.removed(
        None, False, request
    )  # emptied in the page (the user, or a file it refused)
    assert (
        cleared[0] == ""
        and all("no answer yet" in p for p in cleared[1:4])
        and cleared[-1] is False
    )
    assert handlers.removed({"path": str(CHART)}, False, request)[0] == {
        "__type__": "update"
    }

    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor"],
            *GREEDY,
            request,
        )
    )
    assert all(
        frame[0] == {"__type__": "update"} for frame in out
    )  # the message (begin cleared it) stays
    assert _status(out[-1][1]).startswith("done: ")
    assert (
        handlers.service.stops.current("s1") is None
    )  # released when the answer ended


def test_an_unexpected_error_is_a_short_message_with_the_details_in_the_log(
    tiny_vl, caplog
):
    def fail():
        raise Broken("internal detail")

    handlers = Handlers(
        DemoService(
            Interrupting(tiny_vl, "asymspec", at=1, action=fail), AsymSpecConfig()
        )
    )
    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            [],
            *GREEDY,
            SimpleNamespace(session_hash="s2"),
        )
    )
    message = out[-1][0]
    assert "Something went wrong on the server" in message and "Broken" in message
    assert "internal detail" not in message and "internal detail" in caplog.text
    assert _status(out[-1][1]) == "failed: see the message"


def test_each_upload_is_decoded_once(tiny_vl, monkeypatch, tmp_path):
    from PIL import Image as PILImage

    decodes = []
    real = PILImage._getdecoder

    def counting(mode, decoder_name, *args, **kwargs):
        decodes.append(decoder_name)
        return real(mode, decoder_name, *args, **kwargs)

    class Reader:
        name = "reader"

        def describe(self, image=None, key=None):
            return SimpleNamespace(caption=f"{image.width}x{image.height}", ocr="")

    upload = tmp_path / "chart.png"
    upload.write_bytes(CHART.read_bytes())
    service = DemoService(
        tiny_vl, AsymSpecConfig(), captioner=Reader(), upload_folders=[tmp_path]
    )
    monkeypatch.setattr(PILImage, "_getdecoder", counting)
    assert service.describe_image(Upload(str(upload), "chart.png")) == ("256x192", "")
    for _ in range(2):  # two questions about the uploaded image, three methods each
        list(
            service.answer(
                Upload(str(upload), "chart.png"),
                QUESTION,
                CAPTION,
                "",
                *SETTINGS.values(),
                ["floor", "drafter"],
            )
        )
    assert decodes == [
        "zip"
    ]  # PNG's decoder ran once: the upload, not once per event or per method


def test_a_new_upload_stops_the_running_answer_and_clears_its_panels(tiny_vl, tmp_path):
    request = SimpleNamespace(session_hash="s3")
    upload = tmp_path / "new.png"
    Image.new("RGB", (40, 30), "white").save(upload)
    uploaded = []
    vl = Interrupting(
        tiny_vl,
        "asymspec",
        at=1,
        action=lambda: uploaded.append(
            handlers.describe(Upload(str(upload), "new.png"), request)
        ),
    )
    handlers = Handlers(
        DemoService(vl, AsymSpecConfig(), upload_folders=[tmp_path, CHART.parent])
    )
    handlers.begin(request)
    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor"],
            *GREEDY,
            request,
        )
    )
    assert uploaded[0][3] == "" and vl.calls == [
        "asymspec"
    ]  # the upload was fine; the answer stopped
    message, asym, floor, drafter, table, _, results, button = out[-1]
    assert message == {"__type__": "update"}  # left to the upload's own message
    assert all(
        _status(p) == "no answer yet" and not spans(p) for p in (asym, floor, drafter)
    )
    assert results == {} and button["interactive"] is True


def _sampled(service, temperature, seed, top_p=1.0, baselines=("floor", "drafter")):
    """The last frame of one answer with the page's temperature, top-p and seed controls."""
    return list(
        service.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            list(baselines),
            temperature,
            top_p,
            seed,
        )
    )[-1]


def test_a_seeded_sampled_answer_repeats_and_says_it_was_sampled_with_that_seed(
    tiny_vl,
):
    """Every method samples with the page's seed: the same seed repeats the Python API's sampled answer,
    another seed (and greedy decoding) gives other tokens, and the settings line names the seed."""
    service = DemoService(tiny_vl, AsymSpecConfig())
    first, again, other = (
        _sampled(service, 1.0, 7),
        _sampled(service, 1.0, 7),
        _sampled(service, 1.0, 8),
    )
    greedy = _sampled(service, 0.0, None)
    for method, i in (("asymspec", 0), ("floor", 1), ("drafter", 2)):
        ref = tiny_vl.generate(
            str(CHART),
            QUESTION,
            caption=CAPTION,
            method=method,
            config=AsymSpecConfig(**SETTINGS, temperature=1.0, seed=7),
        )
        assert (
            first[5][method]["token_ids"]
            == again[5][method]["token_ids"]
            == ref.token_ids
        )
        assert spans(first[i]) == spans(again[i])
        assert (
            other[5][method]["token_ids"]
            != ref.token_ids
            != greedy[5][method]["token_ids"]
        )
        assert (
            first[5][method]["config"]["seed"] == 7
            and first[5][method]["config"]["temperature"] == 1.0
        )
    table = first[3]
    assert 'sampled: temperature 1 · top-p 1 · seed <b class="seed">7</b>' in table
    assert "greedy (temperature 0)" in greedy[3] and "sampled" not in greedy[3]


def test_temperature_zero_is_the_greedy_answer(tiny_vl):
    service = DemoService(tiny_vl, AsymSpecConfig())
    frame = _sampled(service, 0.0, 123, top_p=0.5, baselines=())
    ref = tiny_vl.generate(
        str(CHART),
        QUESTION,
        caption=CAPTION,
        method="asymspec",
        config=AsymSpecConfig(**SETTINGS),
    )
    assert (
        frame[5]["asymspec"]["token_ids"] == ref.token_ids
        and "greedy (temperature 0)" in frame[3]
    )


def test_an_empty_seed_draws_one_that_is_shown_and_repeats_the_answer(tiny_vl):
    import re

    service = DemoService(tiny_vl, AsymSpecConfig())
    frame = _sampled(service, 1.0, None, baselines=())
    seed = int(re.search(r'seed <b class="seed">(\d+)</b>', frame[3]).group(1))
    assert frame[5]["asymspec"]["config"]["seed"] == seed
    assert (
        _sampled(service, 1.0, float(seed), baselines=())[5]["asymspec"]["token_ids"]
        == frame[5]["asymspec"]["token_ids"]
    )  # the seed box sends floats


class GreedyOnly:
    """The pipeline on a backend whose speculative engine cannot sample (the vLLM backend's
    refuse_speculative_sampling): a typed ConfigError from generate, before any token."""

    def __init__(self, vl):
        self.vl = vl

    def __getattr__(self, name):
        return getattr(self.vl, name)

    def generate(self, method, config, **kwargs):
        if method == "asymspec" and config.samples:
            raise ConfigError(
                f"AsymSpecConfig.temperature={config.temperature!r}: method 'asymspec' on the "
                "vLLM backend decodes greedily only"
            )
        return self.vl.generate(method=method, config=config, **kwargs)


def test_a_backend_that_cannot_sample_is_the_pages_message(tiny_vl):
    handlers = Handlers(DemoService(GreedyOnly(tiny_vl), AsymSpecConfig()))
    request = SimpleNamespace(session_hash="s4")
    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor"],
            0.8,
            1.0,
            3,
            request,
        )
    )
    message, asym, floor, *_, button = out[-1]
    assert "A setting is out of range" in message and "decodes greedily only" in message
    assert _status(asym) == "failed: see the message" and _status(floor) == "not run"
    assert button["interactive"] is True
    out = list(
        handlers.answer(
            str(CHART), QUESTION, CAPTION, "", *SETTINGS.values(), [], *GREEDY, request
        )
    )
    assert _status(out[-1][1]).startswith("done: ")  # the page still answers greedily


@pytest.mark.parametrize(
    "temperature, top_p, seed, match",
    [
        (
            -0.5,
            1.0,
            None,
            "temperature=-0.5 is out of range: the page's temperature takes 0 to 2",
        ),
        (0.7, 0.0, 1, "top_p=0 is out of range: the page's top-p takes 0.01 to 1"),
        (0.7, 1.0, 2.5, "seed=2.5 is invalid: expected an integer"),
    ],
)
def test_a_bad_sampling_setting_is_the_pages_message(
    tiny_vl, temperature, top_p, seed, match
):
    handlers = Handlers(DemoService(tiny_vl, AsymSpecConfig()))
    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            [],
            temperature,
            top_p,
            seed,
            SimpleNamespace(session_hash="s5"),
        )
    )
    assert (
        len(out) == 1
        and "A setting is out of range" in out[0][0]
        and html.escape(match) in out[0][0]
    )


def test_the_seed_box_is_text_and_starts_empty(tiny_vl):
    """The page's seed box: gr.Number showed (and sent) 0 for "empty: a random one", so three sampled clicks
    gave the same answer and said "seed 0". A text box: empty draws a seed, digits are that seed."""
    import gradio as gr
    from asymspec_vl.demo.page import build_demo

    blocks = build_demo(DemoService(tiny_vl, AsymSpecConfig()))
    (seed,) = [
        c for c in blocks.blocks.values() if getattr(c, "elem_id", None) == "seed"
    ]
    assert isinstance(seed, gr.Textbox) and seed.value == ""
    service = DemoService(None, AsymSpecConfig())
    drawn = {
        service.config(2, 1.0, 1.0, "lambda", 8, 0.7, 1.0, text).seed
        for text in ("", " ", "", "")
    }
    assert None not in drawn and len(drawn) > 1
    assert service.config(2, 1.0, 1.0, "lambda", 8, 0.7, 1.0, " 5 ").seed == 5
    with pytest.raises(ConfigError, match="seed='abc' is invalid"):
        service.config(2, 1.0, 1.0, "lambda", 8, 0.7, 1.0, "abc")


def test_the_prompts_tab_says_who_reads_each_view_and_what_it_holds(tiny_vl):
    """Each prompt's title (issue 35 item 8) names the logits read from it, as core/methods.py's table has them
    for the page's methods, and what it holds, as the real prompt shows: x_full holds the caption and OCR text
    besides the image and the question; x_question is the drafter-alone baseline's image + question (δ = a − b
    reads x_full and x_comp, not x_question)."""
    import re

    from asymspec_vl.demo.board import PANELS
    from asymspec_vl.demo.render import PROMPT_TITLES, prompts_html

    from asymspec_vl.core.methods import METHODS

    out = tiny_vl.generate(
        str(CHART),
        "QUESTIONMARK?",
        caption="CAPTIONMARK",
        ocr="OCRMARK",
        config=dict(max_new_tokens=1),
    )
    prompts = out.prompts.__dict__
    marks = {
        "image": "<|image_pad|>",
        "caption": "CAPTIONMARK",
        "OCR text": "OCRMARK",
        "question": "QUESTIONMARK",
    }
    for view, title in PROMPT_TITLES.items():
        readers = {
            src.logits
            for m in PANELS
            for src in (METHODS[m].drafting, *METHODS[m].scoring)
            if src is not None and src.view == view
        }
        assert set(re.findall(r"logits (\w)\b", title)) == readers, (view, title)
        has, _, lacks = title.split(": ", 1)[1].partition(", no ")
        for part, mark in marks.items():
            assert (part in has) == (mark in prompts[view]), (view, part, title)
            assert (mark in prompts[view]) or part in lacks, (view, part, title)
    markup = html.unescape(prompts_html(prompts))
    assert all(title in markup for title in PROMPT_TITLES.values())


@pytest.mark.parametrize(
    "setting, value, match",
    [
        ("K", 20, "K=20 is out of range: the page's K takes 1 to 16"),
        (
            "max_new_tokens",
            5000,
            "max_new_tokens=5000 is out of range: the page's max new tokens takes 1 to 1024",
        ),
        (
            "temperature",
            3.0,
            "temperature=3 is out of range: the page's temperature takes 0 to 2",
        ),
        ("gamma", 0.0, "gamma=0 is out of range: the page's γ takes 0.01 to 1"),
    ],
)
def test_a_number_typed_outside_a_slider_is_the_pages_message_not_a_clamped_run(
    tiny_vl, setting, value, match
):
    """Issue 35 item 8: the page's sliders put a typed number back into their range silently (the browser test
    shows the page now keeps it); the answer refuses it by name, before any model runs, as docs/cli.md says."""
    runs = []
    counting = SimpleNamespace(
        names=tiny_vl.names, pair=tiny_vl.pair, generate=lambda **kw: runs.append(kw)
    )
    handlers = Handlers(DemoService(counting, AsymSpecConfig()))
    settings = dict(SETTINGS, **{setting: value}) if setting in SETTINGS else SETTINGS
    sampling = (value, 1.0, None) if setting == "temperature" else GREEDY
    out = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *settings.values(),
            [],
            *sampling,
            SimpleNamespace(session_hash="s6"),
        )
    )
    assert (
        len(out) == 1
        and "A setting is out of range" in out[0][0]
        and html.escape(match) in out[0][0]
    )
    assert not runs
