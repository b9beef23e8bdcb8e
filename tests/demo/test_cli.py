"""`asymspec-vl demo` flags: defaults, refused values, the captioner they build and how the page names it, a
toy drafter refused as captioner, a taken port as a clear error that points to --port (before any model loads)."""

import socket
from types import SimpleNamespace

import pytest

from asymspec_vl.cli import build_parser, main


def test_defaults_are_the_offline_models_and_easyocr():
    args = build_parser().parse_args(["demo"])
    assert (args.drafter, args.verifier, args.backend) == ("embedded", "embedded", "hf")
    assert (args.K, args.max_new_tokens, args.gate) == (2, 64, "cda")
    assert (args.ocr, args.caption_model, args.host, args.port) == (
        "easyocr",
        "none",
        "127.0.0.1",
        7860,
    )
    assert args.max_upload_mb == 10 and args.max_image_pixels == 16_000_000


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-upload-mb", "0"],
        ["--max-upload-mb", "nan"],
        ["--max-upload-mb", "51"],
        ["--max-image-pixels", "-5"],
        ["--max-image-pixels", "64000001"],
        ["--max-image-pixels", "many"],
        ["--ocr", "tesseract"],
        ["--backend", "onnx"],
        ["--ocr-min-confidence", "1.5"],
        ["--ocr-min-confidence", "x"],
    ],
)
def test_bad_flags_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["demo", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "demo: error" in err and "Traceback" not in err


def test_the_captioner_follows_the_flags(tmp_path):
    from asymspec_vl.captioners import CachedCaptioner, CombinedCaptioner
    from asymspec_vl.demo.cli import build_captioner

    base = dict(
        caption_model="none",
        caption_cache=str(tmp_path),
        no_caption_cache=False,
        device="cpu",
        dtype="auto",
        trust_remote_code=False,
        drafter="embedded",
        ocr_min_confidence=0.3,
    )
    assert build_captioner(SimpleNamespace(ocr="none", **base), vl=None) is None
    both = build_captioner(SimpleNamespace(ocr="easyocr", **base), vl=None)
    assert isinstance(both, CombinedCaptioner) and both.caption is None
    assert isinstance(both.ocr, CachedCaptioner) and both.ocr.directory == tmp_path
    assert "easyocr" in both.ocr.name and both.ocr.inner.min_confidence == 0.3


def test_low_confidence_ocr_is_dropped_by_default():
    """EasyOCR reads shapes and noise as text at about 0.12 confidence (the toy verifier never saw OCR): the
    demo leaves readings under 0.3 out unless told otherwise; a chart's text reads at 0.7 or more."""
    assert build_parser().parse_args(["demo"]).ocr_min_confidence == 0.3
    assert (
        build_parser()
        .parse_args(["demo", "--ocr-min-confidence", "0"])
        .ocr_min_confidence
        == 0.0
    )


@pytest.mark.parametrize(
    "flags, label",
    [
        (
            dict(ocr="easyocr", caption_model="none"),
            "Filled in on upload: OCR by EasyOCR (readings below 30% "
            "confidence left out); no captioner (type the caption). Edit freely.",
        ),
        (
            dict(ocr="none", caption_model="none"),
            "No captioner and no OCR run here: type what the verifier should read.",
        ),
        (
            dict(ocr="easyocr", caption_model="drafter"),
            "Filled in on upload: OCR by EasyOCR (readings below 30% "
            "confidence left out); caption by the VL drafter "
            "(Qwen/Qwen3-VL-2B-Instruct). Edit freely.",
        ),
        (
            dict(ocr="none", caption_model="/models/vlm"),
            "Filled in on upload: no OCR (type the text in the image); "
            "caption by /models/vlm. Edit freely.",
        ),
    ],
)
def test_the_page_says_in_words_what_fills_the_view(flags, label):
    from asymspec_vl.demo.cli import captioner_label

    text = captioner_label(
        SimpleNamespace(
            drafter="Qwen/Qwen3-VL-2B-Instruct", ocr_min_confidence=0.3, **flags
        )
    )
    assert text == label and "=" not in text and "None" not in text


@pytest.mark.parametrize(
    "argv", [["--caption-model", "drafter"], ["--caption-model", "embedded"]]
)
def test_the_toy_drafter_is_refused_as_captioner(argv, capsys):
    assert main(["demo", "--ocr", "none", *argv]) == 2
    err = capsys.readouterr().err
    assert (
        "the embedded toy drafter cannot caption images" in err
        and "--caption-model" in err
    )


@pytest.mark.parametrize(
    "argv", [["--caption-model", "embedded"], ["--caption-model", "drafter"]]
)
def test_serve_refuses_the_toy_drafter_as_captioner_as_the_demo_does(
    argv, capsys, monkeypatch
):
    import asymspec_vl.serve.app

    monkeypatch.setattr(
        asymspec_vl.serve.app,
        "create_app",
        lambda *a, **k: pytest.fail("the server started"),
    )
    assert main(["serve", "--backend", "hf", "--ocr", "none", *argv]) == 2
    err = capsys.readouterr().err
    assert (
        "the embedded toy drafter cannot caption images" in err
        and "--caption-model" in err
    )
    assert (
        build_parser().parse_args(["serve"]).ocr_min_confidence == 0.3
    )  # its OCR as the demo's


def test_a_taken_port_is_a_clear_error_before_the_models_load(capsys, monkeypatch):
    import asymspec_vl.demo.cli as demo_cli

    monkeypatch.setattr(
        demo_cli, "load_from_args", lambda args: pytest.fail("the models loaded first")
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["demo", "--port", str(port), "--ocr", "none"])
    err = capsys.readouterr().err
    assert rc == 2
    assert (
        f"cannot serve on 127.0.0.1:{port}: the port is in use (another demo?): choose another one with --port"
        in err
    )
    assert "server_port" not in err and "launch()" not in err


def test_an_unknown_host_is_a_clear_error(capsys):
    assert main(["demo", "--host", "no-such-host.invalid", "--ocr", "none"]) == 2
    assert (
        "unknown host: pass --host with an address of this machine"
        in capsys.readouterr().err
    )


def test_sigterm_closes_the_demo_with_exit_status_0(tmp_path):
    """As `asymspec-vl serve`: a service manager's SIGTERM is a normal stop, not a crash (143)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("asymspec-vl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "asymspec_vl.cli"]
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "demo", "--port", str(port), "--ocr", "none"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "GRADIO_ANALYTICS_ENABLED": "False",
            },
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
