"""`asymspec-vl demo` flags: defaults, refused values, the captioner they build, a taken port as a clear error."""

import socket
from types import SimpleNamespace

import pytest

from asymspec_vl.cli import build_parser, main


def test_defaults_are_the_offline_models_and_easyocr():
    args = build_parser().parse_args(["demo"])
    assert (args.drafter, args.verifier, args.backend) == ("embedded", "embedded", "hf")
    assert (args.K, args.max_new_tokens, args.gate) == (2, 64, "cda")
    assert (args.ocr, args.caption_model, args.host, args.port) == ("easyocr", "none", "127.0.0.1", 7860)
    assert args.max_upload_mb == 10 and args.max_image_pixels == 16_000_000


@pytest.mark.parametrize("argv", [["--max-upload-mb", "0"], ["--max-upload-mb", "nan"],
                                  ["--max-image-pixels", "-5"], ["--ocr", "tesseract"], ["--backend", "onnx"]])
def test_bad_flags_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["demo", *argv])
    assert e.value.code == 2 and "demo: error" in capsys.readouterr().err


def test_the_captioner_follows_the_flags(tmp_path):
    from asymspec_vl.captioners import CachedCaptioner, CombinedCaptioner
    from asymspec_vl.demo.cli import build_captioner

    base = dict(caption_model="none", caption_cache=str(tmp_path), no_caption_cache=False, device="cpu",
                dtype="auto", trust_remote_code=False)
    assert build_captioner(SimpleNamespace(ocr="none", **base), vl=None) is None
    both = build_captioner(SimpleNamespace(ocr="easyocr", **base), vl=None)
    assert isinstance(both, CombinedCaptioner) and both.caption is None
    assert isinstance(both.ocr, CachedCaptioner) and both.ocr.directory == tmp_path
    assert "easyocr" in both.ocr.name


def test_a_taken_port_is_a_clear_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["demo", "--port", str(port), "--ocr", "none"])
    assert rc == 2
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err
