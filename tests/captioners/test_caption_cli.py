"""captioners/cli.py through `asymspec-vl caption` (cli.main, in process), with recording stand-ins for EasyOCR and
the captioning model: which captioners run with which settings, the cache folder they share, what is printed (text
or JSON), and the refusals (nothing to do, the embedded drafter, a bad image) before any model loads."""

import json
from importlib import metadata

import pytest
from asymspec_vl.captioners import cli as caption_cli
from asymspec_vl.captioners import vlm
from asymspec_vl.captioners.base import ImageText, OCRBox
from PIL import Image

from asymspec_vl.cli import main


class FakeOCR:
    made = []

    def __init__(self, min_confidence=0.0):
        self.name = f"fake-ocr:{min_confidence}"
        self.min_confidence = min_confidence
        FakeOCR.made.append(self)

    def describe(self, image=None, key=None):
        assert image.mode == "RGB"  # the decoded image, not the path
        return ImageText(
            ocr="SALE 50%",
            ocr_boxes=[OCRBox([[0, 0], [1, 0], [1, 1], [0, 1]], "SALE 50%", 0.9)],
            source=self.name,
        )


class FakeVLM:
    made = []

    def __init__(self, model, **settings):
        self.name = f"fake-vlm:{model}"
        self.model, self.settings = model, settings
        FakeVLM.made.append(self)

    def describe(self, image=None, key=None):
        return ImageText(caption="A red sign.", source=self.name)


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    FakeOCR.made, FakeVLM.made = [], []
    monkeypatch.setattr(caption_cli, "EasyOCRCaptioner", FakeOCR)
    monkeypatch.setattr(vlm, "VLMCaptioner", FakeVLM)
    monkeypatch.setattr(caption_cli, "cache_dir", lambda: tmp_path / "home-cache")
    image = tmp_path / "sign.png"
    Image.new("RGB", (8, 6), (200, 0, 0)).save(image)
    return image


def test_ocr_only_by_default_with_a_hint_and_the_default_cache(fakes, tmp_path, capsys):
    assert main(["caption", str(fakes), "--ocr-min-confidence", "0.25"]) == 0
    out, err = capsys.readouterr()
    assert out == f"OCR text (by EasyOCR {metadata.version('easyocr')}):\nSALE 50%\n"
    assert "no caption: pass --model" in err
    [ocr] = FakeOCR.made
    assert ocr.min_confidence == 0.25 and FakeVLM.made == []
    assert (
        len(list((tmp_path / "home-cache" / "captions").glob("*/*.json"))) == 1
    )  # cached under the default


def test_a_caption_by_the_model_with_its_settings(fakes, tmp_path, capsys):
    argv = [
        "caption",
        str(fakes),
        "--model",
        "some/VL-model",
        "--max-new-tokens",
        "32",
        "--device",
        "cpu",
    ]
    argv += [
        "--dtype",
        "float32",
        "--trust-remote-code",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    assert main(argv) == 0
    [model] = FakeVLM.made
    assert model.model == "some/VL-model"
    assert model.settings == dict(
        device="cpu",
        dtype="float32",
        max_new_tokens=32,
        prompt=vlm.DEFAULT_PROMPT,
        trust_remote_code=True,
    )
    out = capsys.readouterr().out
    assert out.startswith(
        "Caption (by some/VL-model):\nA red sign.\n\nOCR text (by EasyOCR "
    )
    assert (
        len(list((tmp_path / "cache").glob("*/*.json"))) == 2
    )  # the caption's and the OCR's entry
    assert not (tmp_path / "home-cache").exists()


def test_prompt_no_ocr_no_cache_and_json(fakes, tmp_path, capsys):
    argv = [
        "caption",
        str(fakes),
        "--model",
        "m",
        "--prompt",
        "Describe.",
        "--no-ocr",
        "--no-cache",
        "--json",
    ]
    assert main(argv) == 0
    assert FakeOCR.made == [] and FakeVLM.made[0].settings["prompt"] == "Describe."
    result = json.loads(capsys.readouterr().out)
    assert (
        result["caption"] == "A red sign."
        and result["ocr"] == ""
        and result["source"] == "fake-vlm:m"
    )
    assert not (tmp_path / "home-cache").exists()  # --no-cache: nothing written


def test_json_carries_the_raw_ocr_boxes(fakes, capsys):
    assert main(["caption", str(fakes), "--json", "--no-cache"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ocr"] == "SALE 50%" and result["caption"] == ""
    assert [b["text"] for b in result["ocr_boxes"]] == ["SALE 50%"]


def test_no_caption_keeps_ocr_only_even_with_a_model(fakes, capsys):
    assert (
        main(["caption", str(fakes), "--model", "m", "--no-caption", "--no-cache"]) == 0
    )
    out, err = capsys.readouterr()
    assert FakeVLM.made == [] and out.startswith("OCR text") and "no caption" not in err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--no-ocr"], "nothing to do: --no-ocr leaves only the caption"),
        (["--no-ocr", "--model", "m", "--no-caption"], "nothing to do"),
        (["--model", "embedded"], "the embedded toy drafter cannot caption images"),
    ],
)
def test_refusals_come_before_any_model(fakes, capsys, extra, words):
    assert main(["caption", str(fakes), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asymspec-vl: error: ") and words in err
    assert FakeOCR.made == [] and FakeVLM.made == []


def test_a_bad_image_fails_before_any_model(fakes, tmp_path, capsys):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image")
    assert main(["caption", str(bad), "--model", "m"]) == 2
    assert "broken.png" in capsys.readouterr().err
    assert FakeOCR.made == [] and FakeVLM.made == []
