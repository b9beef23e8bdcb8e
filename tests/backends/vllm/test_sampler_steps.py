"""The asymspec engine's sampler at two edges, shown on engine outputs against the transformers backend (tiny models,
CPU build): a step without drafts (Floor on the speculative engine, as a server serves it) samples when the
request samples, and min_tokens counts the answer's own tokens, not the hidden prime token the first step emits
(vllm_patches/requests/hidden_tokens.py), so the stop token is held up to exactly position min_tokens - 1."""

import pytest
from helpers import random_request

from asymspec_vl import AsymSpecConfig
from asymspec_vl.core.methods import METHODS

pytestmark = pytest.mark.vllm

BASE = AsymSpecConfig(K=2, max_new_tokens=12, ignore_eos=True)
HOT = BASE.replace(temperature=0.8, seed=5)
REQS = [random_request(s) for s in (3, 4)]


@pytest.fixture(scope="module")
def pipes(tiny_models):
    from asymspec_vl import AsymSpecVL

    paths = dict(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"])
    )
    vl = AsymSpecVL.from_pretrained(**paths, backend="vllm", block_size=16)
    hf = AsymSpecVL.from_pretrained(**paths, device="cpu")
    yield vl, hf
    vl.backend.close()


def served_floor(vl, requests, cfg) -> list[list[int]]:
    """Floor's tokens on the speculative engine (mode "floor": no drafts on any step), as the server runs it."""
    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request

    plan = vl.backend.plan_request(METHODS["floor"], cfg, speculative=True)
    asked = [
        vl.backend.engine_request(
            encode_request(r, vl.pair.processor, vl.pair.tokenizer), plan
        )
        for r in requests
    ]
    assert plan.mode == "floor"
    outs = generate(
        vl.backend.engine(plan.engine),
        [p for p, _ in asked],
        [s for _, s in asked],
    )
    return [list(o.outputs[0].token_ids) for o in outs]


def test_a_step_without_drafts_samples_when_the_request_samples(pipes):
    vl, hf = pipes
    greedy = served_floor(vl, REQS, BASE)
    assert greedy == [r.token_ids for r in hf.generate_batch(REQS, "floor", BASE)]
    for cfg in (HOT, HOT.replace(seed=9, top_k=20)):
        want = [r.token_ids for r in hf.generate_batch(REQS, "floor", cfg)]
        assert (
            want != greedy
        )  # the draws differ from the greedy tokens: the test can tell them apart
        assert served_floor(vl, REQS, cfg) == want


def first_fresh(tokens: list[int], start: int) -> int:
    """The first position >= start whose token does not occur before it."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


@pytest.mark.parametrize("method", ["asymspec", "sd"])
def test_min_tokens_holds_the_stop_token_up_to_position_min_tokens_minus_one(
    pipes, method
):
    """The stop token is the free answer's token at position m - 1 (its first occurrence) and min_tokens is m: it
    is held there, so the answer goes on, as the transformers backend's does; counting the hidden prime token
    would release it one position early and end the answer at m tokens."""
    vl, hf = pipes
    for req in REQS:
        free = vl.generate_batch([req], method, BASE)[0].token_ids
        m = first_fresh(free, 2) + 1
        cfg = BASE.replace(stop_token_ids=(free[m - 1],), min_tokens=m)
        got = vl.generate_batch([req], method, cfg)[0]
        assert (
            got.token_ids[: m - 1] == free[: m - 1]
            and got.token_ids[m - 1] != free[m - 1]
        )
        assert got.token_ids == hf.generate_batch([req], method, cfg)[0].token_ids
