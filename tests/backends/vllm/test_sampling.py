"""Stop strings, sampling and min_tokens on the vLLM backend (tiny models, CPU build), against transformers.

Stop strings: vLLM's output processor cuts them on every engine, and the transformers loop cuts them the same.
Floor and the drafter alone sample with vLLM's own sampler. The speculative engine (asymspec, sd, scd) samples with
the methods' sampled rules, the transformers backend's, and holds min_tokens as it does."""

import pytest
from helpers import random_request

from asymspec_vl import AsymSpecConfig

pytestmark = pytest.mark.vllm

BASE = AsymSpecConfig(K=2, max_new_tokens=16, ignore_eos=True)
REQS = [random_request(s) for s in (3, 4)]


@pytest.fixture(scope="module")
def pipes(tiny_models):
    from asymspec_vl import AsymSpecVL

    paths = dict(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"])
    )
    vl = AsymSpecVL.from_pretrained(**paths, backend="vllm", block_size=16)
    hf = AsymSpecVL.from_pretrained(
        **paths, device="cpu"
    )  # no text drafter: SD drafts with the VL drafter
    yield vl, hf
    vl.backend.close()


def _stop_of(text: str) -> str:
    return text[len(text) // 2 : len(text) // 2 + 2]


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd", "floor", "drafter"])
def test_stop_strings_cut_as_transformers_cuts_them(pipes, method):
    vl, hf = pipes
    free = hf.generate_batch(REQS, method, BASE)
    for include in (False, True):
        cfg = BASE.replace(
            stop=tuple(_stop_of(r.text) for r in free),
            include_stop_str_in_output=include,
        )
        want = hf.generate_batch(REQS, method, cfg)
        got = vl.generate_batch(REQS, method, cfg)
        assert [(r.text, r.token_ids, r.finish_reason) for r in got] == [
            (r.text, r.token_ids, r.finish_reason) for r in want
        ]
        assert all(r.finish_reason == "stop" for r in got)


@pytest.mark.parametrize("method", ["floor", "drafter"])
def test_floor_and_drafter_sample_with_vllms_sampler(pipes, method):
    vl, _ = pipes
    greedy = [r.token_ids for r in vl.generate_batch(REQS, method, BASE)]
    assert [
        r.token_ids
        for r in vl.generate_batch(REQS, method, BASE.replace(temperature=1e-6))
    ] == greedy
    hot = BASE.replace(temperature=5.0, top_p=0.95, top_k=50, min_p=0.01, seed=11)
    first = [r.token_ids for r in vl.generate_batch(REQS, method, hot)]
    assert [
        r.token_ids for r in vl.generate_batch(REQS, method, hot)
    ] == first  # a seed repeats
    assert first != greedy
    stop = greedy[0][1]
    held = vl.generate_batch(
        REQS[:1], method, BASE.replace(stop_token_ids=(stop,), min_tokens=6)
    )[0]
    assert stop not in held.token_ids[:6] and len(held.token_ids) >= 6


SPECULATIVE = ["asymspec", "sd", "scd"]
HOT = BASE.replace(temperature=0.8, seed=5)


@pytest.mark.parametrize("method", SPECULATIVE)
def test_the_speculative_engine_samples_the_transformers_tokens_with_a_seed(
    pipes, method
):
    """One rule, one generator stream per row: with a seed the vLLM speculative engine draws the drafts and
    decides each step as the transformers loop does (asymspec_vl.core.sampling), token for token."""
    vl, hf = pipes
    for cfg in (HOT, HOT.replace(seed=9, top_p=0.9, top_k=20, min_p=0.02)):
        want = [
            (r.token_ids, [t.source for t in r.trace])
            for r in hf.generate_batch(REQS, method, cfg)
        ]
        assert [
            (r.token_ids, [t.source for t in r.trace])
            for r in vl.generate_batch(REQS, method, cfg)
        ] == want


@pytest.mark.parametrize("method", SPECULATIVE)
def test_a_seed_repeats_on_the_speculative_engine_and_another_seed_differs(
    pipes, method
):
    vl, _ = pipes
    greedy = [r.token_ids for r in vl.generate_batch(REQS, method, BASE)]
    first = [r.token_ids for r in vl.generate_batch(REQS, method, HOT)]
    assert [r.token_ids for r in vl.generate_batch(REQS, method, HOT)] == first
    assert [
        r.token_ids for r in vl.generate_batch(REQS, method, HOT.replace(seed=6))
    ] != first
    assert first != greedy
    # temperature -> 0 (vLLM raises 1e-6 to 0.01): the greedy tokens
    assert [
        r.token_ids
        for r in vl.generate_batch(REQS, method, BASE.replace(temperature=1e-6, seed=3))
    ] == greedy


@pytest.mark.parametrize("method", SPECULATIVE)
def test_min_tokens_holds_the_stop_token_back_on_the_speculative_engine(pipes, method):
    """Below min_tokens the stop tokens are -inf in every logits a step reads and in the drafts: the answer
    goes on past the greedy stop token, as the transformers backend's does."""
    vl, hf = pipes
    greedy = vl.generate_batch(REQS[:1], method, BASE)[0].token_ids
    for cfg in (BASE, HOT):
        held = cfg.replace(stop_token_ids=(greedy[1],), min_tokens=6)
        got = vl.generate_batch(REQS[:1], method, held)[0]
        assert greedy[1] not in got.token_ids[:6] and len(got.token_ids) >= 6
        assert got.token_ids == hf.generate_batch(REQS[:1], method, held)[0].token_ids


def test_a_seeded_sampled_request_with_a_chunked_prefill_is_served_and_keeps_its_stream(
    pipes, tiny_models
):
    """A 32-token budget chunks every prompt: vLLM samples a token on each partial-prefill step, discards it and
    rewinds the request's generator (an offset rewind that a CPU generator refused: the engine core died,
    vllm_patches/hooks/cpu_generators.py). Served, and the seeded tokens do not depend on the chunking: the
    speculative methods equal the transformers loop's, Floor and the drafter alone the unchunked engine's."""
    from asymspec_vl import AsymSpecVL

    vl, hf = pipes
    paths = dict(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"])
    )
    chunked = AsymSpecVL.from_pretrained(
        **paths, backend="vllm", block_size=16, max_num_batched_tokens=32
    )
    cfg = HOT.replace(seed=3, max_new_tokens=10)
    try:
        for method, reference in (
            ("asymspec", hf),
            ("scd", hf),
            ("floor", vl),
            ("drafter", vl),
        ):
            want = [r.token_ids for r in reference.generate_batch(REQS, method, cfg)]
            assert [
                r.token_ids for r in chunked.generate_batch(REQS, method, cfg)
            ] == want, method
    finally:
        chunked.backend.close()
