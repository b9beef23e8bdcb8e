"""Property-based fuzzing of the public API on the embedded pair (transformers backend, CPU): random bytes,
small images of every mode and odd arrays as the image, random Unicode (surrogates, control characters,
special-token strings, very long) as question / caption / OCR, random config values. Every outcome is a
result or an AsymSpecError, never another exception, and the next valid request gives the same tokens as
before. Deterministic (derandomized) and sized for CI: MAX_EXAMPLES cases, about a minute on 2 cores."""

import io
from collections import Counter

import numpy as np
import pytest
from helpers import random_image
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from asymspec_vl import (
    AsymSpecConfig,
    AsymSpecError,
    AsymSpecVL,
    BatchInputError,
    GenerationResult,
    Request,
)
from asymspec_vl.core.config import BONUS_RULES, DELTA_SOURCES, GATES
from asymspec_vl.core.methods import NAMES as METHODS

MAX_EXAMPLES = 120
EXPLICIT = 4  # the @example cases of the API fuzz
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def mostly(valid, invalid):
    """`valid` in about 7 draws of 8, else `invalid`: most cases get past validation into decoding (the
    invalid pick is not an end of the range, which hypothesis favours)."""
    return st.integers(0, 7).flatmap(lambda i: invalid if i == 4 else valid)


REFERENCE = dict(
    question="What is the digit on the red circle?",
    caption="A red circle and a blue square.",
    config=AsymSpecConfig(K=2, max_new_tokens=4),
)

# -- images -------------------------------------------------------------------------------------------------
EIGHT_BIT_MODES = [
    "1",
    "L",
    "LA",
    "La",
    "P",
    "PA",
    "RGB",
    "RGBA",
    "RGBa",
    "RGBX",
    "CMYK",
    "YCbCr",
    "LAB",
    "HSV",
]
sides = st.integers(1, 40)


@st.composite
def pil_images(draw):
    h, w = draw(sides), draw(sides)
    rs = np.random.RandomState(draw(st.integers(0, 2**16)))
    kind = draw(
        st.sampled_from(
            EIGHT_BIT_MODES + ["I;16", "I;16B", "I", "F", "gif", "png", "jpeg"]
        )
    )
    rgba = Image.fromarray(rs.randint(0, 256, (h, w, 4), dtype=np.uint8))
    if kind in EIGHT_BIT_MODES:
        return rgba.convert(kind)
    if kind in ("I;16", "I;16B"):
        return Image.frombytes(
            kind,
            (w, h),
            rs.randint(0, 65536, (h, w))
            .astype("<u2" if kind == "I;16" else ">u2")
            .tobytes(),
        )
    if kind == "I":
        low = draw(st.sampled_from([0, -5, 60000]))
        return Image.fromarray(rs.randint(low, low + 10000, (h, w)).astype(np.int32))
    if kind == "F":
        return Image.fromarray(
            (rs.rand(h, w) * draw(st.sampled_from([1.0, 2.0]))).astype(np.float32)
        )
    buf = io.BytesIO()  # an encoded file, possibly cut short
    rgba.convert("RGB" if kind == "jpeg" else "RGBA").save(buf, format=kind.upper())
    data = buf.getvalue()
    return data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


@st.composite
def arrays(draw):
    dtype = draw(
        st.sampled_from(
            [
                np.bool_,
                np.uint8,
                np.uint16,
                np.int32,
                np.int64,
                np.float16,
                np.float32,
                np.float64,
                np.complex64,
            ]
        )
    )
    h, w = draw(sides), draw(sides)
    shape = draw(
        st.sampled_from(
            [
                (h, w),
                (h, w, 1),
                (h, w, 2),
                (h, w, 3),
                (h, w, 4),
                (h, w, 5),
                (3, h, w),
                (h,),
                (),
                (0, w, 3),
            ]
        )
    )
    rs = np.random.RandomState(draw(st.integers(0, 2**16)))
    values = np.asarray(rs.rand(*shape)) * draw(
        st.sampled_from([1.0, 255.0, 65535.0, -1.0, np.nan])
    )
    with np.errstate(
        invalid="ignore"
    ):  # NaN cast to integers: whatever numpy makes of it
        return values.astype(dtype)


images = mostly(
    pil_images(),
    st.one_of(
        arrays(),
        st.binary(max_size=300),
        st.sampled_from([None, 12345, "/no/such/file.png", ["not", "an", "image"]]),
    ),
)

# -- text ---------------------------------------------------------------------------------------------------
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<think>",
    "</think>",
    "<|box_start|>",
    "user",
    "assistant",
    "\n",
]
unicode = st.characters(exclude_categories=["Cs"])  # control characters included
pieces = st.one_of(st.text(unicode, max_size=12), st.sampled_from(SPECIAL))
valid_texts = st.lists(pieces, min_size=1, max_size=6).map(
    "".join
)  # special-token strings are valid text
texts = mostly(
    valid_texts,
    st.one_of(
        st.lists(
            st.one_of(pieces, st.characters(categories=["Cs"])), min_size=1, max_size=6
        ).map("".join),  # surrogates
        st.tuples(pieces, st.integers(100, 3000)).map(
            lambda t: (t[0] or "x") * t[1]
        ),  # very long
        st.sampled_from([None, 123, b"bytes", ["a"]]),
    ),
)

# -- config and method --------------------------------------------------------------------------------------
junk = st.sampled_from(
    [None, "x", -1, 0, 10**400, float("nan"), float("inf"), True, [1], {"a": 1}, 10**7]
)
valid_fields = {
    "beta": st.floats(0, 10),
    "gamma": st.floats(0.01, 1),
    "gate": st.sampled_from(GATES),
    "lam": st.floats(0, 100),
    "delta_source": st.sampled_from(DELTA_SOURCES),
    "bonus": st.sampled_from(BONUS_RULES),
    "stop_token_ids": st.one_of(
        st.none(), st.lists(st.integers(0, 400), min_size=1, max_size=3)
    ),  # some never emitted
    "scd_alpha": st.floats(0.01, 1),
}
valid_configs = st.fixed_dictionaries(
    {"K": st.integers(1, 4), "max_new_tokens": st.integers(1, 4)}, optional=valid_fields
)
bad_configs = st.tuples(
    valid_configs,
    st.sampled_from([*valid_fields, "K", "max_new_tokens", "unknown_field"]),
    st.one_of(junk, st.integers(-2, 2**20)),
).map(lambda t: t[0] | {t[1]: t[2]})
configs = mostly(
    st.one_of(valid_configs, valid_configs.map(lambda d: AsymSpecConfig(**d))),
    st.one_of(bad_configs, st.sampled_from(["K=2", 7, [("K", 2)]])),
)
methods = mostly(st.sampled_from(METHODS), st.sampled_from(["ceiling", None, 3]))


@pytest.fixture(scope="module")
def embedded_vl():
    return AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )


def test_public_api_gives_a_result_or_a_typed_error(embedded_vl):
    vl = embedded_vl
    image = random_image(0, 8, 40)
    reference = vl.generate(image, **REFERENCE).token_ids
    outcomes = Counter()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        image=images,
        question=texts,
        caption=texts,
        ocr=texts,
        config=configs,
        method=methods,
        batch=st.booleans(),
    )
    # one of each kind of bad input, whatever the generated ones reach (the generated sequence shifts with the
    # modules other tests imported before this one)
    @example(b"not an image", "q?", "", "", None, "asymspec", False)
    @example(random_image(2, 8, 40), "", "", "", None, "floor", True)
    @example(random_image(3, 8, 40), "q?", "", "", {"K": 0}, "asymspec", False)
    @example(random_image(4, 8, 40), "q?", "\ud800", "", None, "asymspec", False)
    def check(image, question, caption, ocr, config, method, batch):
        try:
            if batch:  # a valid request beside the random one: only the random one may be named as bad
                valid = Request(random_image(1, 8, 40), REFERENCE["question"])
                results = vl.generate_batch(
                    [valid, Request(image, question, caption, ocr)], method, config
                )
            else:
                results = [
                    vl.generate(
                        image, question, caption, ocr, method=method, config=config
                    )
                ]
        except BatchInputError as e:
            assert list(e.errors) == [1]
            outcomes[f"error {type(e.errors[1]).__name__}"] += 1
        except AsymSpecError as e:
            outcomes[f"error {type(e).__name__}"] += 1
        else:
            assert all(
                isinstance(r, GenerationResult)
                and r.finish_reason in ("stop", "length")
                for r in results
            )
            outcomes["result"] += 1
        assert (
            vl.generate(image=random_image(0, 8, 40), **REFERENCE).token_ids
            == reference
        )

    check()
    print(f"\n{sum(outcomes.values())} fuzz cases: {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) == MAX_EXAMPLES + EXPLICIT
    assert (
        outcomes["result"] >= 10
    )  # the fuzzing reaches decoding, not only the validation
    kinds = {
        k.split()[1] for k in outcomes if k.startswith("error")
    }  # and many kinds of bad input
    assert {
        "ConfigError",
        "EmptyQuestionError",
        "InvalidImageError",
        "InvalidTextError",
    } <= kinds
