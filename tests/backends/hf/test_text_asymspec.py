"""Text-only AsymSpec (drafter: a text LM on the full context; verifier on the compressed one) through the
public API: the cached loop equals Algorithm 1 from scratch, and it runs the very gate/fusion path of the
cross-modal case (kernels.dispatch), with the Triton kernel giving the same tokens as the torch path."""

import pytest
from helpers import ON_TEST_DEVICE, random_request

from asymspec_vl import AsymSpecConfig, AsymSpecVL, Request
from asymspec_vl.backends.hf.reference import reference_asymspec
from asymspec_vl.core.kernels import dispatch
from asymspec_vl.inputs.prompts import encode_request

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Conversion of an array with ndim:DeprecationWarning"
    ),  # interpreter
    pytest.mark.usefixtures("one_torch_thread"),
]
MAX_NEW = 12
N_REQ = 8  # batch 4 runs them as [0:4] + [4:8]
FACTS = [
    "the red box holds 7 apples",
    "the blue bar is 42 units tall",
    "angle A measures 30 degrees",
    "the chart title is sales per year",
    "there are 5 circles and 3 squares",
    "the line rises then falls",
    "area shaded is 25 percent",
    "the sum of the digits is 12",
]


def text_request(i: int) -> Request:
    """A question with a long (full) context for the drafter and a short (compressed) one for the verifier."""
    full = ". ".join(FACTS[j % len(FACTS)] for j in range(i, i + 2 + i % 4))
    return Request(
        question=f"Question {i}: what is the value?",
        full_context=full,
        compressed_context=FACTS[i % len(FACTS)].split(" is ")[0],
    )


@pytest.fixture(scope="module")
def text_vl(tiny_models):
    """AsymSpec with a TEXT drafter: no vision model anywhere."""
    return AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["text_drafter"]),
        images=False,
        verifier=str(tiny_models["verifier"]),
        **ON_TEST_DEVICE,
    )


@pytest.fixture(scope="module")
def requests_and_refs(text_vl):
    reqs = [text_request(i) for i in range(N_REQ)]
    pair, be = text_vl.pair, text_vl.backend
    refs = {}
    for K in (1, 2, 4):
        cfg = AsymSpecConfig(K=K, gamma=0.3, max_new_tokens=MAX_NEW)
        refs[K] = (cfg, [])
        for r in reqs:
            enc = encode_request(r, pair.processor, pair.tokenizer)
            refs[K][1].append(
                reference_asymspec(
                    be.drafter,
                    be.verifier,
                    enc.full,
                    enc.comp,
                    cfg,
                    pair.banned_mask(be.device),
                    pair.stop_ids(cfg),
                    MAX_NEW,
                )
            )
    return reqs, refs


def test_text_views_are_text_and_differ(text_vl):
    assert not hasattr(text_vl.backend.drafter.config, "vision_config")
    res = text_vl.generate(
        question="What is the value?",
        full_context="the red box holds 7 apples",
        compressed_context="a box",
        config=AsymSpecConfig(K=2, max_new_tokens=3),
    )
    assert "7 apples" in res.prompts.x_full and "7 apples" not in res.prompts.x_comp
    assert "a box" in res.prompts.x_comp and 1 <= len(res.token_ids) <= 3


@pytest.mark.parametrize("K", [1, 2, 4])
def test_cached_loop_equals_from_scratch_batch_1_and_4(text_vl, requests_and_refs, K):
    reqs, refs = requests_and_refs
    cfg, expected = refs[K]
    assert [
        text_vl.generate_batch([r], config=cfg)[0].token_ids for r in reqs
    ] == expected
    batch4 = [
        res.token_ids
        for i in range(0, N_REQ, 4)
        for res in text_vl.generate_batch(reqs[i : i + 4], config=cfg)
    ]
    assert batch4 == expected


def test_the_equivalence_exercises_accepts_and_fusions(text_vl, requests_and_refs):
    reqs, refs = requests_and_refs
    res = text_vl.generate_batch(reqs, config=refs[2][0])
    sources = {t.source for r in res for t in r.trace}
    assert {"draft", "fused"} <= sources
    assert (
        0.05
        < sum(r.stats.accepted for r in res) / sum(r.stats.drafted for r in res)
        < 0.95
    )


def test_text_and_cross_modal_share_the_gate_dispatch(text_vl, tiny_vl, monkeypatch):
    """Both cases decide every step through kernels.dispatch.asymspec_step (dispatch.decide_asymspec's path)."""
    calls = []
    real = dispatch.asymspec_step
    monkeypatch.setattr(
        dispatch,
        "asymspec_step",
        lambda *a, **k: calls.append(a[0].shape) or real(*a, **k),
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=4)
    text = text_vl.generate_batch([text_request(0)], config=cfg)[0]
    n_text = len(calls)
    image = tiny_vl.generate_batch([random_request(0)], config=cfg)[0]
    assert (
        n_text == text.stats.steps > 0 and len(calls) - n_text == image.stats.steps > 0
    )


@pytest.mark.parametrize(
    "cfg",
    [
        AsymSpecConfig(K=2, gamma=0.3, max_new_tokens=8),
        AsymSpecConfig(
            K=3,
            gate="lambda",
            delta_source="scd",
            bonus="fused",
            beta=0.5,
            max_new_tokens=8,
        ),
    ],
    ids=["cda", "lambda-scd-fused"],
)
def test_triton_kernel_in_the_loop_gives_the_torch_tokens(text_vl, cfg, monkeypatch):
    reqs = [text_request(i) for i in (1, 2)]
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "torch")
    expected = [r.token_ids for r in text_vl.generate_batch(reqs, config=cfg)]
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "triton")  # the interpreter on CPU
    assert [r.token_ids for r in text_vl.generate_batch(reqs, config=cfg)] == expected
