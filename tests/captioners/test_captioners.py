"""Captioners: EasyOCR offline on a rendered image with known text, the content-hash cache, precomputed
MathVista texts, the VLM captioner (tiny drafter: plumbing only), reading order, and `asymspec-vl caption`."""

import json
import os
import subprocess
import sys

import pytest
from asymspec_vl.captioners import (
    CachedCaptioner,
    CaptionerError,
    CaptionNotFoundError,
    CombinedCaptioner,
    EasyOCRCaptioner,
    ImageText,
    OCRBox,
    PrecomputedCaptioner,
    VLMCaptioner,
    ocr_text,
    parse_easyocr,
    reading_order,
)
from asymspec_vl.evals.mathvista.data import data_files
from PIL import Image, ImageDraw, ImageFont

from asymspec_vl.core.errors import AsymSpecError

KNOWN_TEXT = "Monthly rainfall 2023\nTotal 482 mm Peak July"


@pytest.fixture(scope="module")
def text_image(tmp_path_factory):
    """A rendered image whose text is known: two lines, the second in two pieces."""
    font = ImageFont.load_default(size=30)
    img = Image.new("RGB", (520, 170), "white")
    draw = ImageDraw.Draw(img)
    draw.text((20, 20), "Monthly rainfall 2023", fill="black", font=font)
    draw.text((20, 100), "Total 482 mm", fill="black", font=font)
    draw.text(
        (300, 104), "Peak July", fill="black", font=font
    )  # 4 px lower: still the same line
    path = tmp_path_factory.mktemp("ocr") / "text.png"
    img.save(path)
    return path


@pytest.fixture(scope="module")
def ocr():
    return EasyOCRCaptioner()


def box(x, y, w=40, h=20, text="t"):
    return OCRBox([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], text, 0.9)


def test_reading_order_groups_lines_top_to_bottom_left_to_right():
    boxes = [
        box(200, 52, text="D"),
        box(10, 10, text="A"),
        box(100, 13, text="B"),
        box(10, 50, text="C"),
        box(300, 8, text="B2"),
    ]
    lines = reading_order(boxes)
    assert [[b.text for b in line] for line in lines] == [["A", "B", "B2"], ["C", "D"]]
    assert ocr_text(boxes) == "A B B2\nC D"
    tall = [box(0, 0, h=100, text="tall"), box(50, 10, text="x"), box(50, 70, text="y")]
    assert [[b.text for b in line] for line in reading_order(tall)] == [
        ["tall", "x"],
        ["y"],
    ]
    assert ocr_text([]) == ""


def test_parse_easyocr_literal_never_evaluates_code():
    boxes = parse_easyocr(
        "[([[161, 39], [766, 39], [766, 120], [161, 120]], 'The spring', 0.91), "
        "([[10, 5], [50, 5], [50, 20], [10, 20]], 'top', 0.5)]"
    )
    assert [b.text for b in boxes] == ["The spring", "top"] and boxes[
        0
    ].confidence == 0.91
    assert ocr_text(boxes) == "top\nThe spring"
    assert (
        parse_easyocr("[]") == []
        and parse_easyocr("") == []
        and parse_easyocr(None) == []
    )
    assert parse_easyocr([([5, 3], "point")])[0].box == [[5.0, 3.0]] * 4
    with pytest.raises(CaptionerError):
        parse_easyocr("__import__('os').system('echo hacked')")
    with pytest.raises(CaptionerError):
        parse_easyocr("[(1, 2, 3)]")
    with pytest.raises(CaptionerError):
        parse_easyocr("{'a': 1}")


def test_precomputed_mathvista_captions_and_ocr():
    cap = PrecomputedCaptioner.from_json(data_files()["captions"], data_files()["ocrs"])
    assert cap.name.startswith("precomputed:captions=")
    t = cap.describe(key="1")
    assert t.caption == json.loads(data_files()["captions"].read_text())["texts"]["1"]
    assert t.ocr.splitlines()[0] == "The spring force does" and len(t.ocr_boxes) > 3
    raw = json.loads(data_files()["ocrs"].read_text())["texts"]
    assert sorted(b.text for b in t.ocr_boxes) == sorted(
        b.text for b in parse_easyocr(raw["1"])
    )
    no_caption = next(pid for pid in raw if not cap.has_caption(pid))
    assert cap.describe(key=no_caption).caption == ""  # OCR only
    with pytest.raises(CaptionNotFoundError, match="no precomputed caption"):
        cap.describe(key="99999")
    with pytest.raises(CaptionerError, match="looked up by key"):
        cap.describe(image="x.png")


def test_precomputed_plain_mappings_and_bad_files(tmp_path):
    cap = PrecomputedCaptioner(
        {"a": "a bar chart"}, {"a": "2019 2020", "b": "(A) only text"}
    )
    assert cap.describe(key="a") == ImageText(
        "a bar chart", "2019 2020", [], "precomputed"
    )
    assert cap.describe(key="b").ocr == "(A) only text"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CaptionerError, match="not a JSON file"):
        PrecomputedCaptioner.from_json(captions=bad)
    with pytest.raises(CaptionerError, match="not found"):
        PrecomputedCaptioner.from_json(captions=tmp_path / "none.json")
    with pytest.raises(CaptionerError):
        PrecomputedCaptioner()
    assert issubclass(CaptionNotFoundError, AsymSpecError) and issubclass(
        CaptionerError, AsymSpecError
    )


def test_easyocr_reads_known_text_offline_and_the_cache_hits_on_the_second_call(
    ocr, text_image, tmp_path
):
    inner = Counting(ocr)
    cached = CachedCaptioner(inner, tmp_path / "cache")
    result = cached.describe(text_image)
    assert result.ocr == KNOWN_TEXT
    assert [b.text for b in result.ocr_boxes] == [
        "Monthly rainfall 2023",
        "Total 482 mm",
        "Peak July",
    ]
    assert all(0.0 < b.confidence <= 1.0 and len(b.box) == 4 for b in result.ocr_boxes)
    assert result.source.startswith("easyocr-1.7.2:en")
    again = cached.describe(
        Image.open(text_image)
    )  # same pixels, another object: served by the cache
    assert again == result and (inner.calls, cached.hits, cached.misses) == (1, 1, 1)
    assert EasyOCRCaptioner().reader is ocr.reader  # one reader, built once and reused
    with pytest.raises(CaptionerError, match="min_confidence"):
        EasyOCRCaptioner(min_confidence=2.0)
    with pytest.raises(CaptionerError, match="are not in"):
        _ = EasyOCRCaptioner(model_dir=text_image.parent).reader


class Counting:
    """A captioner wrapper that counts the calls reaching the real captioner."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, 0

    def describe(self, image=None, key=None):
        self.calls += 1
        return self.inner.describe(image, key)


class PixelSum:
    """A cheap deterministic stand-in captioner: the caption is the sum of the pixel values."""

    name = "pixel-sum"

    def describe(self, image=None, key=None):
        from asymspec_vl.inputs.images import load_image

        return ImageText(
            caption=str(sum(load_image(image).tobytes())), source=self.name
        )


def test_cache_is_keyed_by_pixels_and_captioner_and_persists(text_image, tmp_path):
    inner = Counting(PixelSum())
    cached = CachedCaptioner(inner, tmp_path / "cache")
    first = cached.describe(text_image)
    png_copy = tmp_path / "copy.png"
    Image.open(text_image).save(png_copy, optimize=True)  # other bytes, same pixels
    assert cached.describe(png_copy) == first and (inner.calls, cached.hits) == (1, 1)
    other = Image.open(text_image).convert("RGB")
    other.putpixel((0, 0), (0, 0, 0))
    assert cached.describe(other) != first and (inner.calls, cached.misses) == (
        2,
        2,
    )  # one pixel changed
    cold = Counting(PixelSum())  # a new process: the entry comes from disk
    assert (
        CachedCaptioner(cold, tmp_path / "cache").describe(text_image) == first
        and cold.calls == 0
    )
    cold.name = "another-captioner"  # another captioner never reads this one's entries
    CachedCaptioner(cold, tmp_path / "cache").describe(text_image)
    assert cold.calls == 1
    entry = next((tmp_path / "cache").rglob(f"{cached.cache_key(text_image)}.json"))
    entry.write_text("{broken")  # a damaged entry is recomputed
    fresh = Counting(PixelSum())
    assert (
        CachedCaptioner(fresh, tmp_path / "cache").describe(text_image) == first
        and fresh.calls == 1
    )
    memory = CachedCaptioner(Counting(PixelSum()))  # no directory: memory only
    memory.describe(text_image)
    memory.describe(text_image)
    assert memory.inner.calls == 1 and not list(
        (tmp_path / "cache").rglob(".tmp-*")
    )  # writes are atomic


@pytest.mark.parametrize(
    "blocker", ["directory at the entry", "file at the folder", "disk full"]
)
def test_a_cache_write_that_fails_returns_the_result_leaves_no_temp_file_and_is_logged_once(
    text_image, tmp_path, monkeypatch, caplog, blocker
):
    import errno

    from captioners import cache as cache_module

    cached = CachedCaptioner(Counting(PixelSum()), tmp_path / "cache")
    images = [Image.open(text_image).convert("RGB") for _ in range(2)]
    images[1].putpixel((0, 0), (1, 2, 3))
    for img in images:
        ck = cached.cache_key(img)
        if blocker == "directory at the entry":
            cached._path(ck).mkdir(parents=True)
        elif blocker == "file at the folder":
            (tmp_path / "cache").mkdir(exist_ok=True)
            cached._path(ck).parent.write_text("in the way")
    if blocker == "disk full":

        def full(obj, f):
            f.write("{")
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(cache_module.json, "dump", full)
    with caplog.at_level("WARNING", logger="captioners.cache"):
        results = [cached.describe(img) for img in images]
    assert [r.caption for r in results] == [
        PixelSum().describe(img).caption for img in images
    ]
    assert (
        cached.describe(images[0]) == results[0] and cached.inner.calls == 2
    )  # kept in memory
    assert not list(tmp_path.rglob(".tmp-*"))
    warnings = [
        r for r in caplog.records if "caption cache cannot write" in r.getMessage()
    ]
    assert len(warnings) == 1


def test_vlm_captioner_plumbing_with_the_tiny_drafter(tiny_vl, tiny_models, text_image):
    """A tiny random model writes nonsense: this checks wiring, determinism and the vision-token ban."""
    vlm = VLMCaptioner.from_pipeline(tiny_vl, max_new_tokens=6)
    assert vlm.model is tiny_vl.backend.drafter  # the drafter itself, not a second copy
    first = vlm.describe(text_image)
    assert (
        isinstance(first.caption, str) and first.source == vlm.name and first.ocr == ""
    )
    assert (
        vlm.describe(Image.open(text_image)).caption == first.caption
    )  # greedy: deterministic
    for special in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"):
        assert special not in first.caption
    cached = CachedCaptioner(vlm)
    cached.describe(text_image)
    cached.describe(text_image)
    assert (cached.hits, cached.misses) == (1, 1)
    with pytest.raises(CaptionerError, match="not a vision-language model"):
        VLMCaptioner(str(tiny_models["verifier"]))
    with pytest.raises(CaptionerError, match="max_new_tokens"):
        VLMCaptioner.from_pipeline(tiny_vl, max_new_tokens=0)
    both = CombinedCaptioner(vlm, PrecomputedCaptioner(ocr={"k": "2023"}))
    combined = both.describe(text_image, key="k")
    assert combined.caption == first.caption and combined.ocr == "2023"


def test_caption_command(tiny_models, text_image, tmp_path, capsys, monkeypatch):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "caption",
            str(text_image),
            "--model",
            str(tiny_models["vl_drafter"]),
            "--max-new-tokens",
            "4",
            "--cache-dir",
            str(tmp_path / "c"),
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    from importlib import metadata

    heading = f"Caption (by {tiny_models['vl_drafter']}):\n"  # each part says what produced it
    assert out.stdout.startswith(heading)
    assert (
        f"OCR text (by EasyOCR {metadata.version('easyocr')}):\n{KNOWN_TEXT}\n"
        in out.stdout
    )
    assert (
        len(list((tmp_path / "c").rglob("*.json"))) == 2
    )  # the caption and the OCR result, cached
    import asymspec_vl.captioners.ocr

    import asymspec_vl.backends.hf.hf_backend
    from asymspec_vl.cli import main

    with (
        monkeypatch.context() as m
    ):  # served from the cache the first command filled: no model, no OCR reader
        m.setattr(
            asymspec_vl.backends.hf.hf_backend,
            "load_causal_lm",
            lambda *a, **k: pytest.fail("VLM loaded"),
        )
        m.setattr(
            asymspec_vl.captioners.ocr,
            "get_reader",
            lambda *a, **k: pytest.fail("OCR reader built"),
        )
        assert (
            main(
                [
                    "caption",
                    str(text_image),
                    "--model",
                    str(tiny_models["vl_drafter"]),
                    "--max-new-tokens",
                    "4",
                    "--json",
                    "--cache-dir",
                    str(tmp_path / "c"),
                ]
            )
            == 0
        )
    data = json.loads(capsys.readouterr().out)
    assert data["ocr"] == KNOWN_TEXT and len(data["ocr_boxes"]) == 3
    assert out.stdout.startswith(f"{heading}{data['caption']}\n")
    assert main(["caption", str(tmp_path / "missing.png"), "--no-caption"]) == 2
    assert "image file not found" in capsys.readouterr().err
    assert main(["caption", str(text_image), "--no-caption", "--no-ocr"]) == 2
    assert "nothing to do" in capsys.readouterr().err


def test_caption_command_defaults_to_ocr_only():
    from asymspec_vl.cli import build_parser

    args = build_parser().parse_args(
        ["caption", "x.png"]
    )  # no captioning model unless one is named
    assert args.model is None and not args.no_ocr and not args.no_caption


def test_the_embedded_pipeline_s_toy_drafter_is_no_captioner():
    """As the CLI and the demo refuse it: the toy drafter writes toy-world answers, not captions."""
    from asymspec_vl import AsymSpecVL, ConfigError

    vl = AsymSpecVL.from_pretrained("embedded", device="cpu")
    with pytest.raises(
        ConfigError, match="the embedded toy drafter cannot caption images"
    ):
        VLMCaptioner.from_pipeline(vl)
