"""Headless Chromium drives the demo like a user: `asymspec-vl demo` on the embedded toy pair (upload, OCR, the
coloured answer, every bad upload and the empty question, the examples), and a paced copy of the same page where
each decoding step takes half a second, so that Stop lands mid-answer and a second session waits in the queue.
Screenshots go to test-artifacts/."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from asymspec_vl.demo import render

from asymspec_vl.core import trace as T
from tests.demo.test_units import stopped_after
from tests.demo.test_uploads import png_header

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
EXAMPLES = ROOT / "demo" / "examples"
CHART = EXAMPLES / "chart.png"
MULT = json.loads((EXAMPLES / "examples.json").read_text())[
    0
]  # 9 × 14 on the yellow triangle
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1800",
]
WAIT_S = 300  # model loading and CPU decoding on a shared 2-core machine
PANELS = ("asymspec-answer", "floor-answer", "drafter-answer")
STEP_PAUSE_S = 0.5  # the paced page: every decoding step takes at least this long


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _wait_until_served(url: str, alive=lambda: True, log: Path | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        if not alive():
            pytest.fail(f"the demo server exited:\n{_tail(log) if log else ''}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(
                f"the demo server did not answer within {WAIT_S} s:\n{_tail(log) if log else ''}"
            )
        time.sleep(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`asymspec-vl demo` on a free port of 127.0.0.1 (uploads up to 1 MiB), run from a scratch folder."""
    tmp = tmp_path_factory.mktemp("demo-server")
    port, log = _free_port(), tmp / "server.log"
    exe = Path(sys.executable).with_name("asymspec-vl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "asymspec_vl.cli"]
    cmd += [
        "demo",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-new-tokens",
        "24",
        "--max-upload-mb",
        "1",
        "--caption-cache",
        str(tmp / "captions"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_served(
            f"http://127.0.0.1:{port}/", lambda: proc.poll() is None, log
        )
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[
        -4000:
    ]  # user errors are messages, not server tracebacks
    assert "Warning" not in text, text[
        -4000:
    ]  # the log keeps what the operator needs (item 10)


class PacedVL:
    """The embedded pipeline with every decoding step lasting STEP_PAUSE_S: a click reliably lands mid-answer."""

    def __init__(self, vl):
        self.vl = vl

    def __getattr__(self, name):
        return getattr(self.vl, name)

    def generate(self, on_step=None, **kwargs):
        def paced(rows):
            time.sleep(STEP_PAUSE_S)
            on_step(rows)

        return self.vl.generate(on_step=paced, **kwargs)


@pytest.fixture(scope="module")
def paced_server():
    """The demo page on the embedded toy pair, paced, served from this process (no captioner)."""
    from asymspec_vl.demo.page import build_demo, launch
    from asymspec_vl.demo.service import DemoService

    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    port = _free_port()
    demo = launch(
        build_demo(DemoService(PacedVL(vl), AsymSpecConfig(K=2, max_new_tokens=24))),
        port=port,
        block=False,
        quiet=True,
    )
    _wait_until_served(f"http://127.0.0.1:{port}/")
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def _chromium(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.fail(
            "the browser test needs Chromium and chromedriver: "
            "apt-get install -y chromium chromium-driver (.ci/run installs them)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(
        service=Service(executable_path=driver_path), options=options
    )


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = _chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def _open(browser, url):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    # a panel Gradio re-renders between finding an element and reading it: look again at the next poll
    wait = WebDriverWait(
        browser,
        WAIT_S,
        poll_frequency=0.1,
        ignored_exceptions=(StaleElementReferenceException,),
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#question textarea"))
    return wait


def _box(browser, elem_id):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f"#{elem_id} textarea")


def _type(browser, elem_id, text):
    from selenium.webdriver.common.keys import Keys

    box = _box(browser, elem_id)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(
        Keys.DELETE
    )  # a real edit (WebElement.clear() does not reach the page's state)
    if text:
        box.send_keys(text)


def _status(browser, panel) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f"#{panel} .answer-status").text


def _tokens(browser, panel) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, f"#{panel} span.tok")


def _unstale(read):
    """read(), found afresh when Gradio re-rendered what it found before it was read (a
    StaleElementReferenceException under load: the stats and the panels render once more after "done")."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(50):
        try:
            return read()
        except StaleElementReferenceException:
            time.sleep(0.1)
    return read()


def _token_view(browser, panel) -> list[tuple[str, str]]:
    """(text, class) of each token of a panel, read in one go."""
    return _unstale(
        lambda: [(t.text, t.get_attribute("class")) for t in _tokens(browser, panel)]
    )


def _messages(browser) -> list[str]:
    """Every message the page shows: its own message box and Gradio's toasts."""
    from selenium.webdriver.common.by import By

    return _unstale(
        lambda: [
            e.text
            for e in browser.find_elements(
                By.CSS_SELECTOR, "#message .message, [data-testid=toast-text]"
            )
            if e.is_displayed()
        ]
    )


def _error_badges(browser) -> list:
    """Gradio's red "Error" badges over components (what a failed event leaves)."""
    from selenium.webdriver.common.by import By

    badges = browser.find_elements(
        By.XPATH,
        "//*[@data-testid='status-tracker']//*[normalize-space(text())='Error']",
    )
    return [e for e in badges if e.is_displayed()]


def _click_example(browser, wait, example=MULT, until=PANELS):
    """Click an example: it fills the inputs and runs the answer; wait for the `until` panels to be done."""
    from selenium.webdriver.common.by import By

    cell = next(
        c
        for c in browser.find_elements(By.CSS_SELECTOR, "#examples td")
        if c.text.strip()
        and example["question"].startswith(c.text.strip().rstrip(".")[:30])
    )
    _mark_stale(browser)
    cell.click()
    wait.until(
        lambda d: _box(d, "question").get_attribute("value") == example["question"]
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image img"))
    if until:
        wait.until(
            lambda d: (
                all(_status(d, p).startswith("done") for p in until)
                and not _stale(d)
                and d.find_element(By.ID, "answer-button").is_enabled()
            )
        )


def _mark_stale(browser):
    """Mark the panels shown now: a panel re-rendered since has lost the mark (its answer is a new one)."""
    browser.execute_script(
        "document.querySelectorAll('.answer').forEach(e => e.dataset.stale = '1')"
    )


def _stale(browser) -> bool:
    from selenium.webdriver.common.by import By

    return bool(browser.find_elements(By.CSS_SELECTOR, ".answer[data-stale]"))


def _answer(browser, wait, until=("asymspec-answer", "floor-answer", "drafter-answer")):
    from selenium.webdriver.common.by import By

    wait.until(
        lambda d: d.find_element(By.ID, "answer-button").is_enabled()
    )  # the last answer has ended
    _mark_stale(browser)
    browser.find_element(By.ID, "answer-button").click()
    wait.until(
        lambda d: all(_status(d, p).startswith("done") for p in until) and not _stale(d)
    )


def _screenshot(browser, name) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    browser.execute_script("window.scrollTo(0, 0)")
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 1)"


def _stats_cells(browser, method) -> list[str]:
    from selenium.webdriver.common.by import By

    return _unstale(
        lambda: [
            td.text
            for td in browser.find_elements(
                By.CSS_SELECTOR, f"#stats tr.stats-{method} td"
            )
        ]
    )


def test_the_toy_example_answered_with_coloured_tokens(server, browser):
    from selenium.webdriver.common.by import By

    browser.set_window_size(1400, 1000)
    try:
        wait = _open(browser, server)
        fold = browser.execute_script("return window.innerHeight")
        for elem_id in (
            "answer-button",
            "examples",
            "question",
        ):  # the first action is on the first screen
            rect = browser.find_element(By.ID, elem_id).rect
            assert rect["y"] + rect["height"] <= fold, (elem_id, rect, fold)
        _click_example(browser, wait)  # the click alone runs the answer
        _unstale(
            lambda: _check_the_toy_answer(browser)
        )  # it reads every token: read afresh if re-rendered
        _screenshot(browser, "demo-answer.png")  # the first screen at 1400 x 1000
    finally:
        browser.set_window_size(1400, 1800)


def _check_the_toy_answer(browser):
    from selenium.webdriver.common.by import By

    expected = {
        "asymspec-answer": {T.DRAFT, T.FUSED, T.BONUS},
        "floor-answer": {T.VERIFIER},
        "drafter-answer": {T.DRAFTER},
    }
    for panel, allowed in expected.items():
        tokens = _tokens(browser, panel)
        assert tokens, f"no tokens in {panel}"
        for tok in tokens:
            source = tok.get_attribute("class").split("tok-")[1]
            assert source in allowed
            assert tok.value_of_css_property("background-color") == _rgb(
                render.SOURCE_STYLES[source][1]
            )
        text = browser.find_element(By.ID, panel).text
        assert (
            "<|im_end|>" not in text and "im_end" not in text
        )  # the end token is the status, not a token
    assert (
        "126" in browser.find_element(By.ID, "asymspec-answer").text
    )  # 9 × 14: the drafter's digit, the
    assert (
        "126" not in browser.find_element(By.ID, "floor-answer").text
    )  # verifier's arithmetic

    legend = browser.find_element(By.ID, "legend").text
    assert all(
        render.SOURCE_STYLES[s][0] in legend for s in (T.DRAFT, T.FUSED, T.BONUS)
    )
    header = [
        th.text.replace("\n", " ")
        for th in browser.find_elements(By.CSS_SELECTOR, "#stats th")
    ]
    assert header == [
        "method",
        "tokens",
        "steps",
        "acceptance rate",
        "mean accepted length",
        "δ-fused tokens",
        "tokens/s",
        "× Floor (one run)",
        "status",
    ]
    asym, floor = _stats_cells(browser, "asymspec"), _stats_cells(browser, "floor")
    assert (
        0.0 <= float(asym[3]) <= 1.0
        and float(asym[4]) >= 1.0
        and int(asym[5]) >= 0
        and float(asym[6]) > 0
    )
    assert (
        floor[3:6] == ["", "", ""] and float(floor[6]) > 0
    )  # the Floor drafts nothing: nothing shown
    assert (
        asym[7] == floor[7] == ""
    )  # × Floor: none on the toy pair, which cannot beat the Floor (the note says)
    notes = _unstale(lambda: browser.find_element(By.ID, "stats").text)
    assert "timed once" in notes and "cannot be faster than the Floor" in notes
    assert asym[8] in ("end of answer", "token limit") and "stop" not in asym[8]
    for chip in browser.find_elements(
        By.CSS_SELECTOR, ".answer-tokens .chip"
    ):  # space tokens share a chip
        assert chip.get_attribute("textContent").strip()
    answer = browser.find_element(By.CSS_SELECTOR, "#asymspec-answer .answer-text").text
    assert (
        "126" in answer and "<" not in answer
    )  # the plain-text answer above the chips
    assert "Settings used: K=2" in browser.find_element(By.ID, "stats").text
    assert "x_comp" in browser.find_element(By.ID, "prompts").get_attribute(
        "textContent"
    )


def test_upload_fills_the_ocr_box_and_shows_the_whole_image(server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    browser.find_element(By.CSS_SELECTOR, "#image input[type=file]").send_keys(
        str(CHART)
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image img"))
    wait.until(
        lambda d: "Sales per year" in _box(d, "ocr").get_attribute("value")
    )  # EasyOCR, from the pixels
    source = browser.find_element(By.ID, "view-source").text
    assert source == (
        "Filled in on upload: OCR by EasyOCR (readings below 30% confidence left out); no captioner "
        "(type the caption). Edit freely."
    )
    image = browser.find_element(By.CSS_SELECTOR, "#image img")
    assert (
        image.size["width"] >= 2 * 256
    )  # the 256-pixel chart scaled up to the column, not shown at 256
    _type(browser, "question", "What is the value of the tallest bar?")
    _answer(browser, wait, until=("asymspec-answer",))
    note = browser.find_element(By.CSS_SELECTOR, "#asymspec-answer .answer-notes").text
    assert "This image is no toy scene (256×192)" in note
    _screenshot(browser, "demo-upload.png")
    _click_example(browser, wait)
    assert not browser.find_elements(By.CSS_SELECTOR, "#asymspec-answer .answer-notes")
    wait.until(
        lambda d: (
            d.find_element(By.CSS_SELECTOR, "#image img").get_property("naturalWidth")
            == 96
        )
    )
    image = browser.find_element(By.CSS_SELECTOR, "#image img")
    assert (
        image.size["width"] >= 4 * 96
        and image.value_of_css_property("image-rendering") == "pixelated"
    )


def test_examples_are_the_toy_scenes_shown_whole(server, browser):
    from selenium.webdriver.common.by import By

    _open(browser, server)
    rows = browser.find_elements(By.CSS_SELECTOR, "#examples tbody tr")
    assert (
        len(rows) == 3
        and "Charts and photos need real models"
        in browser.find_element(By.ID, "examples-note").text
    )
    for thumb in browser.find_elements(By.CSS_SELECTOR, "#examples img"):
        assert (
            thumb.get_property("naturalWidth") == 96
            and thumb.value_of_css_property("object-fit") == "contain"
        )
        assert (
            thumb.size["width"] >= 2.5 * thumb.size["height"]
        )  # the whole 96×32 scene, not a square crop


def test_at_1280_by_720_the_first_screen_holds_the_question_and_the_first_example(
    server, browser
):
    """Issue 35 item 8: at 1280×720 (the window; its page is what the browser's frame leaves) the first example
    row was cut by the fold; the question box held a grey sample question that read as one filled in."""
    from asymspec_vl.demo.page import QUESTION_PLACEHOLDER
    from selenium.webdriver.common.by import By

    browser.set_window_size(1280, 720)
    try:
        _open(browser, server)
        fold = browser.execute_script("return window.innerHeight")
        assert fold <= 720
        first = browser.find_element(By.CSS_SELECTOR, "#examples tbody tr").rect
        assert first["y"] + first["height"] <= fold, (first, fold)
        for elem_id in ("question", "answer-button", "asymspec-answer"):
            rect = browser.find_element(By.ID, elem_id).rect
            assert rect["y"] + rect["height"] <= fold, (elem_id, rect, fold)
        box = _box(browser, "question")
        assert (
            box.get_attribute("value") == ""
            and box.get_attribute("placeholder") == QUESTION_PLACEHOLDER
        )
        style = browser.execute_script(
            "const s = getComputedStyle(arguments[0], '::placeholder');"
            "return [s.fontStyle, s.color];",
            box,
        )
        assert style[0] == "italic", style  # a hint, not text typed in
        _screenshot(browser, "demo-1280x720.png")
    finally:
        browser.set_window_size(1400, 1800)


def _chat_replies(browser) -> list[str]:
    from selenium.webdriver.common.by import By

    return _unstale(
        lambda: [
            e.text
            for e in browser.find_elements(
                By.CSS_SELECTOR, "#chatbot [data-testid=bot]"
            )
        ]
    )


def _chat_done(browser, n: int) -> bool:
    """n questions asked and answered, the last reply finished."""
    from selenium.webdriver.common.by import By

    return (
        len(browser.find_elements(By.CSS_SELECTOR, "#chatbot [data-testid=user]")) == n
        and len(_chat_replies(browser)) == n
        and _unstale(
            lambda: browser.find_element(By.ID, "chat-status").text
        ).startswith("done")
    )


def test_the_chat_tab_holds_a_conversation_with_retry_and_clear(server, browser):
    """Issue 35 item 8: a chat with history, Retry and Clear beside the single question (its tab still works)."""
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    browser.find_element(
        By.XPATH, "//button[@role='tab' and normalize-space(.)='Chat']"
    ).click()
    wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#chat-image input[type=file]")
    )
    browser.find_element(By.CSS_SELECTOR, "#chat-image input[type=file]").send_keys(
        str(EXAMPLES / MULT["image"])
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chat-image img"))
    _type(browser, "chat-caption", MULT["caption"])
    for n, question in enumerate((MULT["question"], "And the purple circle?"), 1):
        _type(browser, "chat-question", question)
        browser.find_element(By.ID, "chat-send").click()
        wait.until(
            lambda d, n=n: (
                _chat_done(d, n) and d.find_element(By.ID, "chat-send").is_enabled()
            )
        )
    replies = _chat_replies(browser)
    assert all(replies)
    browser.find_element(By.ID, "chat-retry").click()
    wait.until(lambda d: not d.find_element(By.ID, "chat-send").is_enabled())
    wait.until(
        lambda d: _chat_done(d, 2) and d.find_element(By.ID, "chat-send").is_enabled()
    )
    assert (
        _chat_replies(browser) == replies
    )  # greedy: the last reply again, not a third one
    browser.find_element(By.ID, "chat-clear").click()
    wait.until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "#chatbot [data-testid=user]")
    )
    assert not _messages(browser) and not _error_badges(browser)
    browser.find_element(
        By.XPATH, "//button[@role='tab' and normalize-space(.)='Ask one question']"
    ).click()
    _click_example(browser, wait)  # the single question still answers
    assert _tokens(browser, "asymspec-answer")


def _bad_upload_cases(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    fake = tmp_path / "fake.png"
    fake.write_text("not an image either")
    heavy = tmp_path / "heavy.png"
    heavy.write_bytes(b"\x89PNG" + bytes(2 * 2**20))  # over the server's 1 MiB
    return [  # (file, the message, the page refuses it before uploading)
        (notes, "Invalid file type", True),
        (
            fake,
            "fake.png cannot be read as an image: upload a PNG, JPEG, WebP, BMP, GIF or TIFF image.",
            False,
        ),
        (
            Path(png_header(tmp_path / "huge.png", 12_000, 12_000)),
            "huge.png is 12000×12000 = 144,000,000 pixels; this demo accepts up to 16,000,000 pixels (e.g. "
            "4000×4000). Resize the image, or ask whoever runs the demo to raise --max-image-pixels.",
            False,
        ),
        (
            Path(png_header(tmp_path / "big.png", 5000, 5000)),
            "big.png is 5000×5000 = 25,000,000 pixels",
            False,
        ),
        (heavy, "exceed the maximum allowed size", True),
    ]


def test_each_bad_upload_is_one_message_and_the_page_works_after(
    server, browser, tmp_path
):
    from selenium.webdriver.common.by import By

    for path, text, refused_by_the_page in _bad_upload_cases(tmp_path):
        wait = _open(browser, server)
        _click_example(browser, wait)
        browser.find_element(By.CSS_SELECTOR, "#image input[type=file]").send_keys(
            str(path)
        )
        wait.until(
            lambda d, text=text: any(text in m for m in _messages(d)),
            f"{path.name}: no message {text!r}",
        )
        time.sleep(1)  # a second message, a late badge or an answer would show by now
        assert len(_messages(browser)) == 1, _messages(browser)
        assert not _error_badges(browser)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert (
            "Traceback" not in body
            and "/tmp" not in body
            and "decompression bomb" not in body
        )
        if (
            not refused_by_the_page
        ):  # the server refused it: the file left the image box (no broken-image icon)
            assert not browser.find_elements(By.CSS_SELECTOR, "#image img")
        if browser.find_elements(
            By.CSS_SELECTOR, "#image img"
        ):  # the old image stayed, and its answer with it
            assert _tokens(browser, "asymspec-answer")
        else:  # no image: no answer either
            assert not any(_tokens(browser, p) for p in PANELS)
            assert all(_status(browser, p) == "no answer yet" for p in PANELS)
        _screenshot(browser, f"demo-bad-upload-{path.name.replace('.', '-')}.png")
        _click_example(browser, wait)  # the page works after
        assert not browser.find_elements(By.CSS_SELECTOR, "#message .message")


def test_the_empty_question_is_one_message_and_clears_the_answer(server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    _click_example(browser, wait)
    _type(browser, "question", "")
    wait.until(lambda d: d.find_element(By.ID, "answer-button").is_enabled())
    browser.find_element(By.ID, "answer-button").click()
    wait.until(lambda d: _messages(d))
    time.sleep(1)
    assert _messages(browser) == [
        "There is no question\nThe question is empty: type a question about the image."
    ]
    assert not _error_badges(browser) and not any(_tokens(browser, p) for p in PANELS)
    assert all(_status(browser, p) == "not run" for p in PANELS)
    assert browser.find_element(By.ID, "answer-button").is_enabled()
    _screenshot(browser, "demo-empty-question.png")
    _type(browser, "question", MULT["question"])
    _answer(browser, wait)  # the page works after, and the message is gone
    assert not _messages(browser)


def _set_number(browser, elem_id, text):
    """Type into a number box (a slider's or gr.Number's) and leave it, as a user does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(
        By.CSS_SELECTOR,
        f"#{elem_id} input[type=number], #{elem_id} :is(input, textarea)",
    )
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    if text:
        box.send_keys(text)
    box.send_keys(Keys.TAB)


def _settings(browser) -> str:
    from selenium.webdriver.common.by import By

    return _unstale(
        lambda: browser.find_element(By.CSS_SELECTOR, "#stats .settings").text
    )


def _open_decoding_controls(browser, wait):
    from selenium.webdriver.common.by import By

    browser.find_element(
        By.XPATH,
        "//button[.//*[normalize-space(text())='Decoding controls'] or "
        "normalize-space(text())='Decoding controls']",
    ).click()
    wait.until(
        lambda d: d.find_element(
            By.CSS_SELECTOR, "#temperature input[type=number]"
        ).is_displayed()
    )


def test_a_number_typed_outside_a_slider_stays_and_is_the_pages_message(
    server, browser
):
    """Issue 35 item 8: K typed as 20 (its slider: 1 to 16) was put back to 16 when the box lost focus, and the
    answer ran with K = 16 without a word. The box keeps 20 and Answer shows "A setting is out of range"."""
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    _type(browser, "question", MULT["question"])
    _open_decoding_controls(browser, wait)
    _set_number(browser, "k", "20")
    k_box = browser.find_element(By.CSS_SELECTOR, "#k input[type=number]")
    assert k_box.get_attribute("value") == "20"
    browser.find_element(By.ID, "answer-button").click()
    wait.until(lambda d: _messages(d))
    assert (
        "A setting is out of range" in _messages(browser)[0]
        and "K=20 is out of range" in _messages(browser)[0]
    )
    assert k_box.get_attribute("value") == "20" and not _tokens(
        browser, "asymspec-answer"
    )
    assert not _error_badges(browser)


def test_a_sampled_answer_names_its_seed_and_the_seed_repeats_it(server, browser):
    """The temperature and seed typed in "Decoding controls" reach the models: the settings line says the
    answer was sampled with that seed and the same seed repeats it; an empty seed box draws one, named there;
    temperature 0 is greedy again."""
    import re

    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    _click_example(browser, wait)
    greedy = [text for text, _ in _token_view(browser, "asymspec-answer")]
    assert "greedy (temperature 0)" in _settings(browser)
    _open_decoding_controls(browser, wait)
    seed_box = browser.find_element(
        By.CSS_SELECTOR, "#seed textarea, #seed input[type=text]"
    )
    assert (
        seed_box.get_attribute("value") == ""
    )  # empty means a random one: never a 0 that looks chosen
    _set_number(browser, "temperature", "1.8")
    _set_number(browser, "seed", "5")
    answers = []
    for _ in range(2):
        _answer(browser, wait)
        assert "sampled: temperature 1.8 · top-p 1 · seed 5" in _settings(browser)
        answers.append(_token_view(browser, "asymspec-answer"))
    assert answers[0] == answers[1] and answers[0]
    _set_number(browser, "seed", "")
    _answer(browser, wait)
    assert re.search(
        r"sampled: temperature 1.8 · top-p 1 · seed \d+ ", _settings(browser)
    )
    assert not _messages(browser) and not _error_badges(browser)
    _set_number(browser, "temperature", "0")
    _answer(browser, wait)
    assert [text for text, _ in _token_view(browser, "asymspec-answer")] == greedy
    assert "greedy (temperature 0)" in _settings(browser)


def test_the_seed_box_starts_empty_and_each_sampled_answer_draws_its_own_seed(
    server, browser
):
    """The seed box reads as its label says ("empty: a random one"): empty on a fresh page, and two sampled
    clicks with it empty draw two seeds, each named on the settings line."""
    import re

    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    _click_example(browser, wait)
    browser.find_element(
        By.XPATH,
        "//button[.//*[normalize-space(text())='Decoding controls'] or "
        "normalize-space(text())='Decoding controls']",
    ).click()
    seed_box = wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#seed :is(input, textarea)")
    )
    wait.until(lambda d: seed_box.is_displayed())
    assert seed_box.get_attribute("value") == ""
    _set_number(browser, "temperature", "1.8")
    seeds = []
    for _ in range(2):
        _answer(browser, wait)
        seeds.append(
            re.search(
                r"sampled: temperature 1.8 · top-p 1 · seed (\d+) ", _settings(browser)
            ).group(1)
        )
    assert seeds[0] != seeds[1]


def _settled_after_stop(browser, wait):
    """The page after Stop: no panel decoding or waiting, no error badge, Answer usable again."""
    from selenium.webdriver.common.by import By

    wait.until(
        lambda d: not any(_status(d, p) in ("decoding…", "waiting…") for p in PANELS)
    )
    wait.until(lambda d: d.find_element(By.ID, "answer-button").is_enabled())
    time.sleep(1)  # nothing changes any more
    assert not _error_badges(browser) and not _messages(browser)
    assert not any(_status(browser, p) in ("decoding…", "waiting…") for p in PANELS)


def test_stop_mid_answer_keeps_the_partial_answer(paced_server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, paced_server)
    _click_example(browser, wait, until=())  # the click starts the answer
    wait.until(
        lambda d: (
            _tokens(d, "asymspec-answer")
            and _status(d, "asymspec-answer") == "decoding…"
        )
    )
    browser.find_element(By.ID, "stop-button").click()
    _settled_after_stop(browser, wait)
    status, shown = (
        _status(browser, "asymspec-answer"),
        len(_tokens(browser, "asymspec-answer")),
    )
    assert status == stopped_after(shown) and shown >= 1
    assert (
        _status(browser, "floor-answer")
        == _status(browser, "drafter-answer")
        == "not run"
    )
    assert _stats_cells(browser, "asymspec")[8] == "stopped"
    _screenshot(browser, "demo-stop-mid-answer.png")
    _answer(browser, wait)  # the next Answer works
    assert "126" in browser.find_element(By.ID, "asymspec-answer").text


def test_stop_after_the_first_panel(paced_server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, paced_server)
    _click_example(browser, wait, until=())
    wait.until(
        lambda d: (
            _status(d, "asymspec-answer").startswith("done")
            and _tokens(d, "floor-answer")
        )
    )
    browser.find_element(By.ID, "stop-button").click()
    _settled_after_stop(browser, wait)
    assert _status(browser, "asymspec-answer").startswith("done: ")
    shown = len(_tokens(browser, "floor-answer"))
    assert _status(browser, "floor-answer") == stopped_after(shown)
    assert _status(browser, "drafter-answer") == "not run"
    assert [_stats_cells(browser, m)[8] for m in ("asymspec", "floor")] == [
        "end of answer",
        "stopped",
    ]
    _screenshot(browser, "demo-stop-after-first-panel.png")
    _answer(browser, wait)


def test_a_second_session_sees_its_place_in_the_queue(paced_server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    other = _chromium(tmp_path / "profile-2")
    try:
        waits = [_open(b, paced_server) for b in (browser, other)]
        _click_example(browser, waits[0], until=())
        waits[0].until(lambda d: _status(d, "asymspec-answer") == "decoding…")
        _click_example(other, waits[1], until=())
        waits[1].until(
            lambda d: "queue: 1/1" in d.find_element(By.ID, "asymspec-answer").text
        )
        assert _status(other, "asymspec-answer") == "waiting…"
        _screenshot(other, "demo-queue.png")
        browser.find_element(
            By.ID, "stop-button"
        ).click()  # the first session stops: the second one starts
        waits[1].until(lambda d: _status(d, "asymspec-answer").startswith("done"))
        assert "126" in other.find_element(By.ID, "asymspec-answer").text
        other.find_element(By.ID, "stop-button").click()
        _settled_after_stop(other, waits[1])
    finally:
        other.quit()


ATTACK_JS = """
const [payload, done] = arguments;
const post = (url, body) => fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                                        body: JSON.stringify(body)});
(async () => {
  const out = {};
  const {event_id} = await (await post("gradio_api/call/describe", {data: [payload]})).json();
  out.api = await (await fetch("gradio_api/call/describe/" + event_id)).text();
  // the page's own upload event, as the page's script sends it, in a session of its own
  const dep = (await (await fetch("config")).json()).dependencies.find(d => d.api_name === "page_describe");
  const session = "attacker" + Math.random().toString(36).slice(2);
  out.join = await (await post("gradio_api/queue/join", {data: [payload], fn_index: dep.id, session_hash: session,
                                                         event_data: null, trigger_id: dep.targets[0][0]})).text();
  const reader = (await fetch("gradio_api/queue/data?session_hash=" + session)).body.getReader();
  let text = "";
  while (!text.includes("process_completed")) {
    const {value, done: end} = await reader.read();
    if (end) break;
    text += new TextDecoder().decode(value);
  }
  reader.cancel();
  out.page = text;
  done(out);
})().catch(e => done({error: String(e)}));
"""


def test_the_page_and_its_api_open_no_file_of_the_servers_disk(
    server, browser, tmp_path
):
    """From the demo's page, a script sends a path of the server's disk (a copy of the chart in a chmod-700
    folder, and a symlink to it inside Gradio's upload folder) to /describe and to the page's own upload event:
    the chart's OCR text never comes back, each refusal is the demo's one message, and the page works after."""
    from gradio.utils import get_upload_folder

    secret = tmp_path / "private" / "secret.png"
    secret.parent.mkdir()
    shutil.copy(CHART, secret)
    secret.parent.chmod(0o700)
    link = Path(get_upload_folder()) / f"asymspec-test-{tmp_path.name}" / "cat.png"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    try:
        wait = _open(browser, server)
        browser.set_script_timeout(WAIT_S)
        for path in (secret, link, secret.with_name("missing.png")):
            out = browser.execute_async_script(
                ATTACK_JS, {"path": str(path), "orig_name": "cat.png"}
            )
            assert "error" not in out, out
            assert "Sales" not in json.dumps(out), (path, out)  # the chart's OCR text
            assert (
                "The image did not arrive on the server: upload it again." in out["api"]
            )
            assert (
                "The image did not arrive on the server: upload it again."
                in out["page"]
            )
        _click_example(
            browser, wait, until=("asymspec-answer",)
        )  # the page works after
        assert not _messages(browser) and not _box(browser, "ocr").get_attribute(
            "value"
        ).count("Sales")
    finally:
        shutil.rmtree(link.parent, ignore_errors=True)
