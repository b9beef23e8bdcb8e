"""The demo's API endpoints through gradio_client: streamed answers equal the Python API's, errors are messages."""

import json
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from asymspec_vl.demo.uploads import Upload

from asymspec_vl import AsymSpecConfig
from tests.demo.test_units import spans

CHART = Path(__file__).resolve().parents[2] / "demo" / "examples" / "chart.png"
QUESTION, CAPTION, OCR = (
    "What is the value of the tallest bar?",
    "A bar chart of sales per year.",
    "12 30 21 17",
)
MAX_PIXELS, MAX_BYTES = 100_000, 64 * 1024  # the chart: 256 x 192 = 49,152 pixels, 7 KB
SETTINGS = dict(K=3, beta=1.0, gamma=0.5, gate="cda", max_new_tokens=10)


class PixelCaptioner:
    """A stand-in captioner (the captioners protocol): proves the uploaded pixels reached it."""

    name = "pixels"

    def describe(self, image=None, key=None):
        return SimpleNamespace(
            caption=f"an image of {image.width}x{image.height} pixels",
            ocr=f"top-left pixel {image.getpixel((0, 0))}",
        )


class Recorder:
    """The pipeline, recording how each generate call ended ("done" or the exception's name)."""

    def __init__(self, vl):
        self.vl, self.outcomes = vl, []

    def __getattr__(self, name):
        return getattr(self.vl, name)

    def generate(self, **kwargs):
        try:
            result = self.vl.generate(**kwargs)
        except BaseException as e:
            self.outcomes.append(type(e).__name__)
            raise
        self.outcomes.append("done")
        return result


@pytest.fixture(scope="module")
def recorder(tiny_vl):
    return Recorder(tiny_vl)


@pytest.fixture(scope="module")
def app(recorder):
    from asymspec_vl.demo.page import build_demo, launch
    from asymspec_vl.demo.service import DemoService

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service = DemoService(
        recorder,
        AsymSpecConfig(),
        captioner=PixelCaptioner(),
        max_image_pixels=MAX_PIXELS,
        max_file_bytes=MAX_BYTES,
    )
    demo = launch(
        build_demo(service),
        host="127.0.0.1",
        port=port,
        max_file_bytes=MAX_BYTES,
        block=False,
        quiet=True,
    )
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def client(app):
    from gradio_client import Client

    return Client(app, verbose=False)


def ask(client, image=CHART, question=QUESTION, baselines=("floor", "drafter"), **over):
    from gradio_client import handle_file

    s = {**SETTINGS, **over}
    decoding = (
        [s.get("temperature", 0.0), s.get("top_p", 1.0), s.get("seed")]
        if {"temperature", "top_p", "seed"} & set(over)
        else []
    )  # left out: the page's defaults
    job = client.submit(
        handle_file(str(image)),
        question,
        CAPTION,
        OCR,
        s["K"],
        s["beta"],
        s["gamma"],
        s["gate"],
        s["max_new_tokens"],
        list(baselines),
        *decoding,
        api_name="/answer",
    )
    job.result()
    return job.outputs()


@pytest.fixture(scope="module")
def streamed(client):
    return ask(client)


def test_streamed_answers_equal_the_python_api(streamed, tiny_vl):
    asym, floor, drafter, table, prompts, results = streamed[-1]
    cfg = AsymSpecConfig(**SETTINGS)
    end_ids = tiny_vl.pair.stop_ids(cfg)
    for method, markup in (("asymspec", asym), ("floor", floor), ("drafter", drafter)):
        ref = tiny_vl.generate(
            str(CHART), QUESTION, caption=CAPTION, ocr=OCR, method=method, config=cfg
        )
        shown = (
            ref.trace[:-1] if ref.token_ids[-1] in end_ids else ref.trace
        )  # the end token is the status
        assert [(c, t) for c, _, t in spans(markup)] == [
            (f"tok tok-{t.source}", t.text) for t in shown
        ]
        assert (
            results[method]["text"] == ref.text
            and results[method]["token_ids"] == ref.token_ids
        )
        ending = {"stop": "end of answer", "length": "token limit"}[ref.finish_reason]
        assert f"done: {ending}" in markup
        row = table.split(f'<tr class="stats-{method}">')[1].split("</tr>")[0]
        cells = [c.split("</td>")[0] for c in row.split("<td>")[1:]]
        assert cells[1:3] == [str(ref.stats.emitted), str(ref.stats.steps)]
        if (
            method == "asymspec"
        ):  # what applies to AsymSpec: acceptance, mean accepted length, δ-fused tokens
            assert cells[3:6] == [
                f"{ref.stats.acceptance_rate:.2f}",
                f"{ref.stats.mean_accepted_length:.2f}",
                str(sum(t.source == "fused" for t in ref.trace)),
            ]
        else:  # the baselines draft nothing: those cells stay empty
            assert cells[3:6] == ["", "", ""]
        assert cells[8] == ending
        assert (
            cells[7] == ""
        )  # × Floor: none on a pair that cannot beat the Floor (the note under it says why)
    assert {s for c, _, _ in spans(asym) for s in [c.split("tok-")[1]]} <= {
        "draft",
        "fused",
        "bonus",
    }
    assert (
        results["asymspec"]["prompts"]["x_comp"].count(CAPTION) == 1
    )  # the verifier read the caption


def test_answers_stream_token_by_token(streamed):
    counts = [(len(spans(a)), len(spans(f)), len(spans(d))) for a, f, d, *_ in streamed]
    assert len(streamed) > 3 and counts[0] == (0, 0, 0)
    assert counts == sorted(counts), "a panel shrank while streaming"
    final = [t for _, _, t in spans(streamed[-1][0])]
    for a, *_ in streamed:  # every partial AsymSpec answer is a prefix of the final one
        partial = [t for _, _, t in spans(a)]
        assert partial == final[: len(partial)]
    assert any("decoding…" in a for a, *_ in streamed[1:-1])


def test_baselines_can_be_left_out(client):
    asym, floor, drafter, table, _, results = ask(
        client, baselines=(), max_new_tokens=3
    )[-1]
    assert list(results) == ["asymspec"] and len(results["asymspec"]["token_ids"]) >= 1
    assert "not run" in floor and "not run" in drafter and "stats-floor" not in table
    json.dumps(results)  # the results output is plain JSON


def test_describe_prefills_the_verifiers_view(client):
    from gradio_client import handle_file

    caption, ocr = client.predict(handle_file(str(CHART)), api_name="/describe")
    assert caption == "an image of 256x192 pixels"
    assert ocr == "top-left pixel (255, 255, 255)"


def _error(client, **kw):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as e:
        ask(client, **kw)
    return e.value


def test_bad_uploads_are_messages(client, tmp_path):
    from PIL import Image

    fake = tmp_path / "fake.png"
    fake.write_bytes(b"this is not a picture")
    err = _error(client, image=fake)
    assert err.title == "InvalidImageError" and err.message.startswith(
        "fake.png cannot be read as an image"
    )

    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert _error(client, image=text).message.startswith(
        "notes.txt is not an image file"
    )

    wide = tmp_path / "wide.png"
    Image.new("RGB", (400, 300), "white").save(wide)  # 120,000 pixels, a 1 KB file
    err = _error(client, image=wide)
    assert err.title == "ImageTooLargeError"
    assert err.message.startswith(
        "wide.png is 400×300 = 120,000 pixels; this demo accepts up to 100,000 pixels"
    )


def test_uploads_over_the_size_limit_are_refused(client, app, tmp_path):
    import httpx

    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG" + bytes(MAX_BYTES + 10))
    with pytest.raises(
        ValueError, match="exceeds the maximum file size"
    ):  # the client checks first ...
        ask(client, image=big)
    with big.open("rb") as f:  # ... and the server refuses it too
        r = httpx.post(
            app + "gradio_api/upload",
            files={"files": ("big.png", f, "image/png")},
            timeout=30,
        )
    assert r.status_code == 413 and "maximum allowed size" in r.text


@pytest.mark.parametrize(
    "over, title, match",
    [
        (dict(question="  "), "EmptyQuestionError", "The question is empty"),
        (dict(K=2.5), "ConfigError", "K=2.5 is invalid"),
        (dict(gamma=0.0), "ConfigError", "gamma=0.0 is invalid"),
        (dict(gate="nope"), "ConfigError", "gate='nope' is invalid"),
        (dict(baselines=["sd"]), "ConfigError", "unknown baseline(s) sd"),
        (
            dict(temperature=-1.0),
            "ConfigError",
            "temperature=-1.0 is invalid: expected a number in [0, 100]",
        ),
        (dict(temperature=0.5, seed=1.5), "ConfigError", "seed=1.5 is invalid"),
    ],
)
def test_bad_settings_are_messages(client, over, title, match):
    err = _error(client, **over)
    assert err.title == title and match in err.message


def test_a_seed_repeats_the_python_apis_sampled_answer(client, tiny_vl):
    answers = {
        seed: ask(client, baselines=(), temperature=1.0, top_p=0.9, seed=seed)[-1]
        for seed in (7, 8)
    }
    ref = tiny_vl.generate(
        str(CHART),
        QUESTION,
        caption=CAPTION,
        ocr=OCR,
        method="asymspec",
        config=AsymSpecConfig(**SETTINGS, temperature=1.0, top_p=0.9, seed=7),
    )
    assert (
        answers[7][5]["asymspec"]["token_ids"]
        == ref.token_ids
        != answers[8][5]["asymspec"]["token_ids"]
    )
    assert 'seed <b class="seed">7</b>' in answers[7][3]
    assert (
        "greedy (temperature 0)" in ask(client, baselines=())[-1][3]
    )  # left out: greedy, as before


def test_cancelling_stops_the_decoding(client, recorder):
    from gradio_client import handle_file

    before = len(recorder.outcomes)
    job = client.submit(
        handle_file(str(CHART)),
        QUESTION,
        CAPTION,
        OCR,
        2,
        1.0,
        0.5,
        "cda",
        1024,
        [],
        api_name="/answer",
    )
    deadline = time.monotonic() + 120
    while len(job.outputs()) < 3:  # decoding has started
        assert time.monotonic() < deadline and not job.done(), "no streamed output"
        time.sleep(0.05)
    job.cancel()
    while len(recorder.outcomes) == before:
        assert time.monotonic() < deadline + 120, "the decoding did not end"
        time.sleep(0.1)
    assert recorder.outcomes[before:] == [
        "Cancelled"
    ]  # stopped mid-way, not run to its 1024-token budget


def test_only_the_api_endpoints_are_public(client):
    assert set(
        client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    ) == {"/describe", "/answer"}


def test_page_works_after_errors(client):
    *_, results = ask(client, baselines=("floor",), max_new_tokens=2)[-1]
    assert set(results) == {"asymspec", "floor"}


def _call(app, api, data) -> str:
    """A curl-style call of the public API: POST /gradio_api/call/<api>, then read its event stream whole."""
    import httpx

    r = httpx.post(f"{app}gradio_api/call/{api}", json={"data": data}, timeout=30)
    assert r.status_code == 200, r.text
    return httpx.get(
        f"{app}gradio_api/call/{api}/{r.json()['event_id']}", timeout=120
    ).text


def test_the_api_opens_no_file_outside_the_upload_folder(app, tmp_path):
    """The exploit of issue 22: /describe and /answer sent a path of the server's disk (a chmod-700 folder) as
    Gradio file data without `meta` (which Gradio's own check skips), or disguised (a symlink out of the upload
    folder, `..`); the secret image's content never comes back, and every refusal says the same words."""
    import httpx
    from gradio.utils import get_upload_folder

    from tests.demo.test_uploads import _outside_paths

    uploads = (
        Path(get_upload_folder()) / f"asymspec-test-{tmp_path.name}"
    )  # inside the live server's upload folder
    secret_content = "77x55"  # what the captioner would say about the secret image
    try:
        cases = _outside_paths(tmp_path, uploads)
        secret = tmp_path / "private" / "secret.png"
        missing = str(secret.with_name("missing.png"))
        (tmp_path / "private").chmod(0o700)
        answers = {}
        for case, payload in cases.items():
            if isinstance(
                payload, Upload
            ):  # the disguises, as the exploit sends them: file data without meta
                payload = {"path": payload.path, "orig_name": payload.name}
            answers[case] = _call(app, "describe", [payload])
            assert (
                secret_content not in answers[case] and "event: error" in answers[case]
            ), case
        refusal = answers["file data without meta"]
        assert json.loads(refusal.split("data: ")[1]) == {
            "error": "The image did not arrive on the server: upload it again.",
            "duration": 10,
            "visible": True,
            "title": "InvalidImageError",
        }
        for case in (
            "symlink out",
            "dot-dot",
            "missing",
            "the folder itself",
            "a folder in it",
            "NUL byte",
            "a long name",
        ):  # the same words for an existing file, a missing one, a folder ...
            assert answers[case] == refusal, case
        # what Gradio refuses itself (a plain path; file data with meta outside its folder): no content either,
        # and the same answer whether the file is there or not
        assert answers["plain path"] == _call(app, "describe", [missing])
        assert answers["file data with meta"] == _call(
            app, "describe", [{**cases["file data with meta"], "path": missing}]
        )
        streamed = _call(
            app,
            "answer",
            [
                cases["file data without meta"],
                QUESTION,
                CAPTION,
                OCR,
                2,
                1.0,
                0.5,
                "cda",
                4,
                [],
                0.0,
                1.0,
                None,
            ],
        )
        assert streamed == refusal
        with secret.open("rb") as f:  # the same file, uploaded by its owner, is read
            r = httpx.post(
                app + "gradio_api/upload",
                files={"files": ("secret.png", f, "image/png")},
                timeout=30,
            )
        assert secret_content in _call(
            app,
            "describe",
            [
                {
                    "path": r.json()[0],
                    "orig_name": "secret.png",
                    "meta": {"_type": "gradio.FileData"},
                }
            ],
        )
    finally:
        import shutil

        shutil.rmtree(uploads, ignore_errors=True)
