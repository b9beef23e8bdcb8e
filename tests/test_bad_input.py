"""Bad inputs get clear typed errors, and the same pipeline serves the next request normally."""

import io
import os
import struct
import zlib

import numpy as np
import pytest
from helpers import random_image
from PIL import Image

from asymspec_vl import (
    AsymSpecConfig,
    AsymSpecVL,
    BatchInputError,
    ConfigError,
    EmptyQuestionError,
    ImageTooLargeError,
    InputError,
    InvalidImageError,
    InvalidTextError,
    PromptTooLongError,
    Request,
    RequestFailedError,
    VocabularyMismatchError,
)
from asymspec_vl.toy.tiny import TinySizes, train_tokenizer, write_text_model

CFG = AsymSpecConfig(K=2, max_new_tokens=6)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring width x height pixels, with almost no data (never decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00"))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def works_after(tiny_vl):
    """Asserts that a normal request still succeeds on the same pipeline."""

    def check():
        res = tiny_vl.generate(
            random_image(1), "What is shown?", caption="a chart", config=CFG
        )
        assert len(res.token_ids) >= 1

    return check


@pytest.mark.parametrize(
    "image, error, words",
    [
        (png_bytes(random_image(0))[:200], InvalidImageError, "corrupt"),
        (
            b"this is a text file, not an image\n" * 10,
            InvalidImageError,
            "not an image",
        ),
        (Image.new("RGB", (0, 0)), InvalidImageError, "no pixels"),
        (np.zeros((0, 0, 3), dtype=np.uint8), InvalidImageError, "no pixels"),
        (bomb_png(40_000, 40_000), ImageTooLargeError, "limit"),
        ("/nonexistent/picture.png", InvalidImageError, "not found"),
        (12345, InvalidImageError, "unsupported image type"),
    ],
)
def test_bad_images(tiny_vl, works_after, image, error, words):
    with pytest.raises(error, match=words):
        tiny_vl.generate(image, "What is shown?", config=CFG)
    works_after()


def test_bad_image_file_on_disk(tiny_vl, works_after, tmp_path):
    path = tmp_path / "broken.jpg"
    path.write_bytes(
        b"\xff\xd8\xff\xe0" + b"\x00" * 64
    )  # a JPEG signature and nothing else
    with pytest.raises(InvalidImageError, match=str(path)):
        tiny_vl.generate(str(path), "What is shown?", config=CFG)
    works_after()


@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_empty_question(tiny_vl, works_after, question):
    with pytest.raises(EmptyQuestionError):
        tiny_vl.generate(random_image(0), question, config=CFG)
    works_after()


def test_prompt_longer_than_context(tiny_vl, works_after):
    caption = (
        "a very long description of the figure " * 1500
    )  # far beyond the tiny models' 4096 positions
    with pytest.raises(PromptTooLongError, match=r"verifier's prompt \(x_comp\) has"):
        tiny_vl.generate(
            random_image(0),
            "What is shown?",
            caption=caption,
            method="floor",
            config=CFG,
        )
    works_after()


def test_bad_request_in_a_batch_fails_before_any_compute(tiny_vl, works_after):
    reqs = [
        Request(random_image(2), "What is shown?"),
        Request(b"garbage", "What is shown?"),
    ]
    with pytest.raises(BatchInputError) as info:
        tiny_vl.generate_batch(reqs, config=CFG)
    assert list(info.value.errors) == [1] and isinstance(
        info.value.errors[1], InvalidImageError
    )
    with pytest.raises(
        InvalidImageError
    ):  # a batch of one raises the request's own error
        tiny_vl.generate_batch(reqs[1:], config=CFG)
    works_after()


def test_vocabulary_mismatch(tiny_models, tmp_path):
    """Drafter and verifier may differ (a cross-family pair, inputs/vocab_map.py); SD's text drafter drafts in the
    drafter's ids and must share its vocabulary."""
    other = train_tokenizer(
        ["a completely different corpus of words"] * 50, vocab_size=600
    )
    text_drafter = write_text_model(tmp_path / "other_text_drafter", other, TinySizes())
    with pytest.raises(VocabularyMismatchError, match="share one vocabulary"):
        AsymSpecVL.from_pretrained(
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(tiny_models["verifier"]),
            text_drafter=str(text_drafter),
            device="cpu",
        )


def test_unknown_method_and_backend(tiny_vl, tiny_models):
    with pytest.raises(ConfigError, match="method"):
        tiny_vl.generate(random_image(0), "What?", method="ceiling")
    with pytest.raises(ConfigError, match="backend"):
        AsymSpecVL.from_pretrained(
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(tiny_models["verifier"]),
            backend="onnx",
        )


# -- text and config arguments (issue 12, item 3) ------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (
            dict(question="What is \ud800 shown?"),
            InvalidTextError,
            r"question holds '\\ud800' at position 8",
        ),
        (
            dict(caption="a \udfff chart"),
            InvalidTextError,
            "caption holds .* lone surrogate",
        ),
        (dict(ocr="12 \ud83d"), InvalidTextError, "ocr holds"),
        (dict(ocr=123), InvalidTextError, "ocr must be a str or None, got int"),
        (
            dict(caption=["a", "chart"]),
            InvalidTextError,
            "caption must be a str or None, got list",
        ),
        (dict(question=42), InvalidTextError, "question must be a str, got int"),
        (dict(question=None), EmptyQuestionError, "empty"),
        (
            dict(image=None, full_context=b"bytes"),
            InvalidTextError,
            "full_context must be a str or None, got bytes",
        ),
        (
            dict(image=None, full_context="ctx", compressed_context="\ud800"),
            InvalidTextError,
            "compressed_context",
        ),
        (dict(config={"K": 0}), ConfigError, r"AsymSpecConfig.K=0"),
        (dict(config={"topk": 3}), ConfigError, "unknown AsymSpecConfig field"),
        (dict(config={1: 2}), ConfigError, "config keys"),
        (
            dict(config="K=2"),
            ConfigError,
            "config must be an AsymSpecConfig, a dict of its fields or None, got str",
        ),
        (dict(config={"gate": ["cda"]}), ConfigError, "gate"),
        (dict(config={"beta": 10**400}), ConfigError, "beta"),
        (dict(config={"stop_token_ids": 5}), ConfigError, "stop_token_ids"),
        (dict(config={"stop_token_ids": "12"}), ConfigError, "stop_token_ids"),
        (dict(method=None), ConfigError, "method=None"),
        (dict(on_step=5), ConfigError, "on_step must be callable"),
    ],
)
def test_bad_arguments_raise_typed_errors_naming_them(
    tiny_vl, works_after, kwargs, error, words
):
    args = dict(image=random_image(0), question="What is shown?", config=CFG) | kwargs
    with pytest.raises(error, match=words):
        tiny_vl.generate(**args)
    works_after()


def test_documented_coercions(tiny_vl):
    """caption / ocr None read as "" (no caption, no OCR); a dict config is AsymSpecConfig(**dict)."""
    img = random_image(4)
    ref = tiny_vl.generate(img, "What is shown?", caption="", ocr="", config=CFG)
    same = tiny_vl.generate(
        img,
        "What is shown?",
        caption=None,
        ocr=None,
        config={"K": 2, "max_new_tokens": 6},
    )
    assert (
        same.token_ids == ref.token_ids
        and same.prompts == ref.prompts
        and same.config == CFG
    )


# -- batches (issue 12, item 4) ---------------------------------------------------------------------------
def test_batch_validation_names_every_bad_request_before_anything_runs(
    tiny_vl, works_after, monkeypatch
):
    long_caption = "a very long description of the figure " * 1500
    reqs = [
        Request(random_image(1), "What is shown?"),
        Request(random_image(2), "  "),
        Request(random_image(3), "What is shown?"),
        Request(b"not an image", "What is shown?"),
        Request(random_image(4), "What?", ocr=123),
        "not a request",
        Request(random_image(5), "What?", caption=long_caption),
    ]
    monkeypatch.setattr(
        tiny_vl.backend, "run", lambda *a, **k: pytest.fail("a model ran")
    )
    with pytest.raises(BatchInputError) as info:
        tiny_vl.generate_batch(reqs, method="floor", config=CFG)
    e = info.value
    assert {i: type(err) for i, err in e.errors.items()} == {
        1: EmptyQuestionError,
        3: InvalidImageError,
        4: InvalidTextError,
        5: InputError,
        6: PromptTooLongError,
    }
    assert isinstance(e, InputError) and str(e).startswith(
        "5 of 7 requests are invalid (nothing was run): "
    )
    for i in e.errors:
        assert f"request {i}: {type(e.errors[i]).__name__}: " in str(e)
    with pytest.raises(InputError, match="requests must be a list"):
        tiny_vl.generate_batch(Request(random_image(1), "What?"), config=CFG)
    monkeypatch.undo()
    assert tiny_vl.generate_batch([], config=CFG) == []
    works_after()


@pytest.fixture
def poisoned(tiny_vl, monkeypatch):
    """Makes the transformers backend fail on any batch holding the request with caption "poison" (as a
    model run that fails on one request would), and returns that request."""
    from asymspec_vl.backends.hf import source as hf_source
    from asymspec_vl.inputs.prompts import encode_request

    bad = Request(random_image(7), "What is shown?", caption="poison")
    bad_ids = encode_request(
        bad, tiny_vl.pair.processor, tiny_vl.pair.tokenizer
    ).comp.ids
    real_init = hf_source.HFSource.__init__

    def init(self, model, prompts, pad_id, mm=None):
        if bad_ids in [list(p) for p in prompts]:
            raise RuntimeError("simulated failure of the poisoned request")
        real_init(self, model, prompts, pad_id, mm)

    monkeypatch.setattr(hf_source.HFSource, "__init__", init)
    return bad


def _alone(vl, req, method):
    return vl.generate_batch([req], method, CFG)[0].token_ids


@pytest.mark.parametrize("method", ["asymspec", "floor"])
def test_a_failed_request_is_marked_and_the_finished_ones_come_back(
    tiny_vl, works_after, poisoned, method
):
    good = [
        Request(random_image(5), "What is shown?", caption="a chart"),
        Request(random_image(6), "How many?"),
    ]
    results = tiny_vl.generate_batch([good[0], poisoned, good[1]], method, CFG)
    assert [r.finish_reason != "error" for r in results] == [True, False, True]
    assert [results[0].token_ids, results[2].token_ids] == [
        _alone(tiny_vl, g, method) for g in good
    ]
    failed = results[1]
    assert (
        failed.error == "RuntimeError: simulated failure of the poisoned request"
        and failed.token_ids == []
    )
    assert failed.to_dict()["error"] == failed.error

    with pytest.raises(
        RequestFailedError, match="1 of 3 requests failed: request 1: RuntimeError"
    ) as info:
        tiny_vl.generate_batch(
            [good[0], poisoned, good[1]], method, CFG, on_error="raise"
        )
    assert (
        info.value.failed == [1]
        and info.value.results[2].token_ids == results[2].token_ids
    )
    with pytest.raises(
        RuntimeError, match="simulated"
    ):  # every request failed: not about one request
        tiny_vl.generate_batch([poisoned, poisoned], method, CFG)
    with pytest.raises(ConfigError, match="on_error"):
        tiny_vl.generate_batch(good, method, CFG, on_error="ignore")
    works_after()


def test_a_caller_stopping_the_decoding_is_not_retried(tiny_vl, poisoned):
    class Stop(Exception):
        pass

    calls = []

    def on_step(rows):
        calls.append(len(rows))
        raise Stop()

    with pytest.raises(Stop):
        tiny_vl.generate_batch(
            [Request(random_image(1), "What?"), Request(random_image(2), "Why?")],
            config=CFG,
            on_step=on_step,
        )
    assert calls == [2]
    streamed = []
    results = tiny_vl.generate_batch(
        [Request(random_image(1), "What?"), poisoned],
        config=CFG,
        on_step=lambda rows: streamed.append([len(r.token_ids) for r in rows]),
    )
    assert streamed[-1] == [
        len(results[0].token_ids),
        0,
    ]  # rows stream in batch order while decoded one by one


# -- stop tokens (issue 12, item 6) ---------------------------------------------------------------------------
def test_stop_token_ids_that_can_never_be_emitted_are_refused(tiny_vl, works_after):
    vocab = tiny_vl.pair.vocab_size
    with pytest.raises(
        ConfigError,
        match=f"holds \\[{vocab}, 999999\\], outside the vocabulary of {vocab} tokens",
    ):
        tiny_vl.generate(
            random_image(0),
            "What?",
            config=CFG.replace(stop_token_ids=(2, 999999, vocab)),
        )
    pad = tiny_vl.pair.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    with pytest.raises(ConfigError, match=r"\<\|image_pad\|\>.*never emits"):
        tiny_vl.generate(
            random_image(0), "What?", config=CFG.replace(stop_token_ids=[pad])
        )
    works_after()


# -- the caption cache (issue 12, item 5) ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "entry",
    [
        "[1, 2]",
        '"text"',
        '{"caption": 5}',
        '{"ocr": null}',
        '{"ocr_boxes": [{"box": "x", "text": "a"}]}',
        '{"ocr_boxes": [{"box": [[0, 0], [1, 0], [1, 1]], "text": "a"}]}',
        '{"ocr_boxes": [{"box": [[0, 0], [1, 0], [1, 1], [0, 1]], "text": 7}]}',
    ],
)
def test_a_cache_entry_of_the_wrong_shape_is_recomputed(tmp_path, entry):
    from asymspec_vl.captioners import CachedCaptioner, ImageText

    class Counting:
        name = "counting-v1"
        calls = 0

        def describe(self, image=None, key=None):
            self.calls += 1
            return ImageText(caption="a chart", ocr="12 30", source=self.name)

    inner = Counting()
    cache = CachedCaptioner(inner, directory=tmp_path)
    img = random_image(0)
    path = tmp_path / cache.cache_key(img)[:2] / f"{cache.cache_key(img)}.json"
    path.parent.mkdir(parents=True)
    path.write_text(entry)
    assert cache.describe(img) == ImageText(
        caption="a chart", ocr="12 30", source="counting-v1"
    )
    assert inner.calls == 1 and cache.misses == 1
    fresh = CachedCaptioner(
        inner, directory=tmp_path
    )  # the entry was rewritten: a new cache hits it
    assert (
        fresh.describe(img).caption == "a chart"
        and inner.calls == 1
        and fresh.hits == 1
    )


def test_paths_that_are_no_image_file_say_what_they_are(tmp_path):
    """Issue 22 item 11: a name over 255 bytes, a folder, a FIFO and a URL each get their own words, typed."""
    from asymspec_vl.inputs.images import load_image

    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for image, words in [
        (tmp_path / ("x" * 300 + ".png"), "longer than the file system allows"),
        (str(tmp_path / ("y" * 256) / "a.png"), "longer than the file system allows"),
        (tmp_path, "is a directory, not an image file"),
        (
            fifo,
            "is not a regular file (a FIFO, a socket or a device)",
        ),  # and returns at once
        ("http://example.com/cat.png", "http://example.com/cat.png is a URL"),
        ("https://example.com/cat.png", "is a URL"),
        (str(tmp_path / "missing.png"), "image file not found"),
    ]:
        with pytest.raises(InvalidImageError) as e:
            load_image(image)
        assert words in str(e.value), (image, str(e.value))
        assert "not found" not in str(e.value) or words == "image file not found"
