"""Bad inputs get clear typed errors, and the same pipeline serves the next request normally."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from asymspec_vl import (AsymSpecConfig, AsymSpecVL, EmptyQuestionError, ImageTooLargeError,
                         InvalidImageError, PromptTooLongError, Request, VocabularyMismatchError)
from asymspec_vl.tiny import TinySizes, train_tokenizer, write_text_model
from helpers import random_image

CFG = AsymSpecConfig(K=2, max_new_tokens=6)


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring width x height pixels, with almost no data (never decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b"")


@pytest.fixture
def works_after(tiny_vl):
    """Asserts that a normal request still succeeds on the same pipeline."""
    def check():
        res = tiny_vl.generate(random_image(1), "What is shown?", caption="a chart", config=CFG)
        assert len(res.token_ids) >= 1
    return check


@pytest.mark.parametrize("image, error, words", [
    (png_bytes(random_image(0))[:200], InvalidImageError, "corrupt"),
    (b"this is a text file, not an image\n" * 10, InvalidImageError, "not an image"),
    (Image.new("RGB", (0, 0)), InvalidImageError, "no pixels"),
    (np.zeros((0, 0, 3), dtype=np.uint8), InvalidImageError, "no pixels"),
    (bomb_png(40_000, 40_000), ImageTooLargeError, "limit"),
    ("/nonexistent/picture.png", InvalidImageError, "not found"),
    (12345, InvalidImageError, "unsupported image type"),
])
def test_bad_images(tiny_vl, works_after, image, error, words):
    with pytest.raises(error, match=words):
        tiny_vl.generate(image, "What is shown?", config=CFG)
    works_after()


def test_bad_image_file_on_disk(tiny_vl, works_after, tmp_path):
    path = tmp_path / "broken.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)  # a JPEG signature and nothing else
    with pytest.raises(InvalidImageError, match=str(path)):
        tiny_vl.generate(str(path), "What is shown?", config=CFG)
    works_after()


@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_empty_question(tiny_vl, works_after, question):
    with pytest.raises(EmptyQuestionError):
        tiny_vl.generate(random_image(0), question, config=CFG)
    works_after()


def test_prompt_longer_than_context(tiny_vl, works_after):
    caption = "a very long description of the figure " * 1500  # far beyond the tiny models' 4096 positions
    with pytest.raises(PromptTooLongError, match="verifier prompt has"):
        tiny_vl.generate(random_image(0), "What is shown?", caption=caption, method="floor", config=CFG)
    works_after()


def test_bad_request_in_a_batch_fails_before_any_compute(tiny_vl, works_after):
    reqs = [Request("What is shown?", random_image(2)), Request("What is shown?", b"garbage")]
    with pytest.raises(InvalidImageError):
        tiny_vl.generate_batch(reqs, config=CFG)
    works_after()


def test_vocabulary_mismatch(tiny_models, tmp_path):
    other = train_tokenizer(["a completely different corpus of words"] * 50, vocab_size=600)
    verifier = write_text_model(tmp_path / "other_verifier", other, TinySizes())
    with pytest.raises(VocabularyMismatchError, match="share one vocabulary"):
        AsymSpecVL.from_pretrained(drafter=str(tiny_models["vl_drafter"]), verifier=str(verifier), device="cpu")


def test_unknown_method_and_backend(tiny_vl, tiny_models):
    from asymspec_vl import ConfigError

    with pytest.raises(ConfigError, match="method"):
        tiny_vl.generate(random_image(0), "What?", method="ceiling")
    with pytest.raises(ConfigError, match="backend"):
        AsymSpecVL.from_pretrained(drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"]),
                                   backend="onnx")
