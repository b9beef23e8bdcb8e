"""Stop strings, sampling and min_tokens on the vLLM backend (tiny models, CPU build), against transformers.

Stop strings: vLLM's output processor cuts them on every engine, and the transformers loop cuts them the same.
Floor and the drafter alone sample with vLLM's own sampler. The speculative engine decodes greedily: sampling
(temperature >= 1e-5) and min_tokens there are refused by name, never answered wrongly."""

import pytest

from asymspec_vl import AsymSpecConfig, ConfigError
from helpers import random_request

pytestmark = pytest.mark.vllm

BASE = AsymSpecConfig(K=2, max_new_tokens=16, ignore_eos=True)
REQS = [random_request(s) for s in (3, 4)]


@pytest.fixture(scope="module")
def pipes(tiny_models):
    from asymspec_vl import AsymSpecVL

    paths = dict(drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"]))
    vl = AsymSpecVL.from_pretrained(**paths, backend="vllm", block_size=16)
    hf = AsymSpecVL.from_pretrained(**paths, device="cpu")  # no text drafter: SD drafts with the VL drafter
    yield vl, hf
    vl.backend.close()


def _stop_of(text: str) -> str:
    return text[len(text) // 2:len(text) // 2 + 2]


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd", "floor", "drafter"])
def test_stop_strings_cut_as_transformers_cuts_them(pipes, method):
    vl, hf = pipes
    free = hf.generate_batch(REQS, method, BASE)
    for include in (False, True):
        cfg = BASE.replace(stop=tuple(_stop_of(r.text) for r in free), include_stop_str_in_output=include)
        want = hf.generate_batch(REQS, method, cfg)
        got = vl.generate_batch(REQS, method, cfg)
        assert [(r.text, r.token_ids, r.finish_reason) for r in got] == \
            [(r.text, r.token_ids, r.finish_reason) for r in want]
        assert all(r.finish_reason == "stop" for r in got)


@pytest.mark.parametrize("method", ["floor", "drafter"])
def test_floor_and_drafter_sample_with_vllms_sampler(pipes, method):
    vl, _ = pipes
    greedy = [r.token_ids for r in vl.generate_batch(REQS, method, BASE)]
    assert [r.token_ids for r in vl.generate_batch(REQS, method, BASE.replace(temperature=1e-6))] == greedy
    hot = BASE.replace(temperature=5.0, top_p=0.95, top_k=50, min_p=0.01, seed=11)
    first = [r.token_ids for r in vl.generate_batch(REQS, method, hot)]
    assert [r.token_ids for r in vl.generate_batch(REQS, method, hot)] == first  # a seed repeats
    assert first != greedy
    stop = greedy[0][1]
    held = vl.generate_batch(REQS[:1], method, BASE.replace(stop_token_ids=(stop,), min_tokens=6))[0]
    assert stop not in held.token_ids[:6] and len(held.token_ids) >= 6


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd"])
def test_the_speculative_engine_refuses_sampling_by_name(pipes, method):
    vl, _ = pipes
    with pytest.raises(ConfigError, match=r"AsymSpecConfig.temperature=0.7.*greedily only"):
        vl.generate_batch(REQS[:1], method, BASE.replace(temperature=0.7))
    with pytest.raises(ConfigError, match=r"AsymSpecConfig.min_tokens=3"):
        vl.generate_batch(REQS[:1], method, BASE.replace(min_tokens=3))
    cold = vl.generate_batch(REQS[:1], method, BASE.replace(temperature=1e-6, seed=3))[0]  # below 1e-5: greedy
    assert cold.token_ids == vl.generate_batch(REQS[:1], method, BASE)[0].token_ids
