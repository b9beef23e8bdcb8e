"""Headless Chromium drives the served demo (`asymspec-vl demo` on the embedded models) like a user would:
upload, question, answer with coloured tokens and stats, error messages, examples; screenshots to test-artifacts/."""

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

from asymspec_vl import trace as T
from asymspec_vl.demo import render

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
EXAMPLES = ROOT / "demo" / "examples"
CHART = EXAMPLES / "chart.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1800"]
WAIT_S = 300  # model loading and CPU decoding on a shared 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`asymspec-vl demo` on a free port of 127.0.0.1, run from a scratch folder; stopped at the end."""
    tmp = tmp_path_factory.mktemp("demo-server")
    port, log = _free_port(), tmp / "server.log"
    exe = Path(sys.executable).with_name("asymspec-vl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "asymspec_vl.cli"]
    cmd += ["demo", "--host", "127.0.0.1", "--port", str(port), "--max-new-tokens", "12",
            "--caption-cache", str(tmp / "captions")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the demo server exited with {proc.returncode}:\n{_tail(log)}")
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the demo server did not answer within {WAIT_S} s:\n{_tail(log)}")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in _tail(log), _tail(log)  # user errors are messages, not server tracebacks


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.fail("the browser test needs Chromium and chromedriver: "
                    "apt-get install -y chromium chromium-driver (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    yield driver
    driver.quit()


def _open(browser, url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    wait = WebDriverWait(browser, WAIT_S)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#question textarea"))
    return wait


def _box(browser, elem_id):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f"#{elem_id} textarea")


def _type(browser, elem_id, text):
    from selenium.webdriver.common.keys import Keys

    box = _box(browser, elem_id)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # a real edit (WebElement.clear() does not reach the page's state)
    if text:
        box.send_keys(text)


def _screenshot(browser, name) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 1)"


def test_upload_ask_and_read_the_coloured_answer(server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    browser.find_element(By.CSS_SELECTOR, "#image input[type=file]").send_keys(str(CHART))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image img"))
    # EasyOCR (the demo's default OCR) fills the verifier's OCR box from the uploaded pixels
    wait.until(lambda d: "Sales per year" in _box(d, "ocr").get_attribute("value"))
    _type(browser, "caption", "A bar chart of sales per year, 2019 to 2022.")
    _type(browser, "question", "What is the value of the tallest bar?")
    browser.find_element(By.ID, "answer-button").click()
    panels = ("asymspec-answer", "floor-answer", "drafter-answer")
    wait.until(lambda d: all(d.find_element(By.CSS_SELECTOR, f"#{p} .answer-status").text.startswith("done")
                             for p in panels))

    expected = {"asymspec-answer": {T.DRAFT, T.FUSED, T.BONUS}, "floor-answer": {T.VERIFIER},
                "drafter-answer": {T.DRAFTER}}
    counts = {}
    for panel, allowed in expected.items():
        tokens = browser.find_elements(By.CSS_SELECTOR, f"#{panel} span.tok")
        assert tokens, f"no tokens in {panel}"
        counts[panel] = len(tokens)
        for tok in tokens:
            source = tok.get_attribute("class").split("tok-")[1]
            assert source in allowed
            assert tok.value_of_css_property("background-color") == _rgb(render.SOURCE_STYLES[source][1])

    legend = browser.find_element(By.ID, "legend").text
    assert all(render.SOURCE_STYLES[s][0] in legend for s in (T.DRAFT, T.FUSED, T.BONUS))
    header = [th.text.replace("\n", " ") for th in browser.find_elements(By.CSS_SELECTOR, "#stats th")]
    assert header[:7] == ["method", "tokens", "steps", "acceptance rate", "mean accepted length",
                          "δ-fused tokens", "tokens/s"]
    for method, panel in (("asymspec", "asymspec-answer"), ("floor", "floor-answer")):
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, f"#stats tr.stats-{method} td")]
        assert int(cells[1]) == counts[panel]
        assert float(cells[6]) > 0  # tokens/s
        assert float(cells[4]) >= 1.0  # mean accepted length: at least one token per step
        if method == "asymspec":
            assert 0.0 <= float(cells[3]) <= 1.0
        else:
            assert cells[3] == "–"
    _screenshot(browser, "demo-answer.png")


def test_errors_are_messages_in_the_page(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    upload = browser.find_element(By.CSS_SELECTOR, "#image input[type=file]")

    def toast(text):
        wait.until(lambda d: any(text in t.text for t in d.find_elements(By.CSS_SELECTOR, "[data-testid=toast-text]")))

    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    upload.send_keys(str(notes))
    toast("Invalid file type")  # the page refuses it before uploading
    fake = tmp_path / "fake.png"
    fake.write_text("not an image either")
    upload.send_keys(str(fake))
    toast("the upload is not a readable image")  # the server's check, shown by the /describe event
    browser.find_element(By.CSS_SELECTOR, "#image input[type=file]").send_keys(str(CHART))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image img"))
    browser.find_element(By.ID, "answer-button").click()  # no question typed
    toast("the question is empty")
    _screenshot(browser, "demo-error.png")
    assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text


def test_examples_fill_the_inputs(server, browser):
    from selenium.webdriver.common.by import By

    wait = _open(browser, server)
    first = json.loads((EXAMPLES / "examples.json").read_text())[0]
    cell = next(c for c in browser.find_elements(By.CSS_SELECTOR, "td, button")
                if c.text.strip() == first["question"])
    cell.click()
    wait.until(lambda d: _box(d, "question").get_attribute("value") == first["question"])
    assert _box(browser, "caption").get_attribute("value") == first["caption"]
    assert _box(browser, "ocr").get_attribute("value") == first["ocr"]
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image img"))
