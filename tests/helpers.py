"""Test helpers: stand-in images and requests (no real image data is available offline)."""

import os

import numpy as np
import pytest
from PIL import Image

# The device the transformers-backend tests decode on: "cpu" (CI); on a CUDA machine
# ASYMSPEC_TEST_DEVICE=cuda runs the same oracle tests on the GPU (tests/on_gpu.sh). Always float32: the
# loading default on CUDA is bfloat16, where a batched, cached forward rounds otherwise than a from-scratch one
# and the exact oracles flip tokens (measured on an H200: SD == Floor on 293 of 300 toy questions in bf16).
TEST_DEVICE = os.environ.get("ASYMSPEC_TEST_DEVICE", "cpu")
ON_TEST_DEVICE = {"device": TEST_DEVICE, "dtype": "float32"}


def random_image(seed: int, min_side: int = 32, max_side: int = 200) -> Image.Image:
    """A random RGB image of random size (a stand-in: no real image data is available offline)."""
    rs = np.random.RandomState(seed)
    h, w = rs.randint(min_side, max_side, 2)
    return Image.fromarray((rs.rand(h, w, 3) * 255).astype("uint8"))


QUESTIONS = [
    "What is the value of the largest bar?",
    "How many circles are shown in the figure?",
    "Which color is the triangle on the left?",
    "What is the sum of the two numbers in the picture?",
    "Find the measure of angle A. Choices: (A) 30 (B) 45 (C) 60 (D) 90",
    "What is the title of the chart?",
    "Is the line increasing? Answer yes or no.",
    "What percent of the area is shaded?",
]


def random_request(seed: int):
    """An image + question + caption + OCR request with seed-dependent sizes and lengths."""
    from asymspec_vl import Request

    rs = np.random.RandomState(1000 + seed)
    caption = " ".join(["a figure with shapes and a bar chart"] * int(rs.randint(1, 4)))
    ocr = " ".join(str(x) for x in rs.randint(0, 100, int(rs.randint(0, 6))))
    return Request(
        random_image(seed), QUESTIONS[seed % len(QUESTIONS)], caption=caption, ocr=ocr
    )


def runner_of(llm):
    """The model runner of an in-process vLLM engine (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    return llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner


def summary(results):
    """What must agree between backends: tokens, sources, finish, and the acceptance counters."""
    return [
        (
            r.token_ids,
            [t.source for t in r.trace],
            r.finish_reason,
            r.stats.steps,
            r.stats.drafted,
            r.stats.accepted,
            r.stats.emitted,
            r.stats.accepted_at,
        )
        for r in results
    ]


def assert_same_logprobs(got, want, tol: float = 1e-4) -> list:
    """Two backends' results (rows of one batch) carry the same tokens and, per token, the same id, distribution,
    logprob and alternatives (ids in order, values within tol). Returns the distributions seen, in order."""
    seen = []
    assert len(got) == len(want)
    for x, y in zip(want, got):
        assert y.token_ids == x.token_ids
        assert len(y.logprobs) == len(x.logprobs) == len(x.token_ids)
        for a, b in zip(x.logprobs, y.logprobs):
            assert (b.token_id, b.distribution) == (a.token_id, a.distribution)
            assert b.logprob == pytest.approx(a.logprob, abs=tol)
            assert [i for i, _ in b.top] == [i for i, _ in a.top]
            assert [lp for _, lp in b.top] == pytest.approx(
                [lp for _, lp in a.top], abs=tol
            )
            seen.append(b.distribution)
    return seen


def first_fresh_position(ids: list[int], start: int) -> int:
    """The first index >= start whose token does not occur earlier in ids: with that token as the only stop
    token, decoding ends exactly there."""
    return next(i for i in range(start, len(ids)) if ids[i] not in ids[:i])
