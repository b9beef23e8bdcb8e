"""Sampling, stop strings and min_tokens on every method through the transformers loop (tiny models)."""

import pytest
from helpers import random_request

from asymspec_vl import AsymSpecConfig
from asymspec_vl.core.methods import NAMES
from asymspec_vl.core.stop_strings import check

BASE = AsymSpecConfig(K=2, max_new_tokens=16, ignore_eos=True)


def run(vl, method, cfg, seed=3):
    return vl.generate_batch([random_request(seed)], method, cfg)[0]


@pytest.mark.parametrize("method", NAMES)
def test_tau_zero_and_tau_to_zero_give_the_greedy_tokens(tiny_vl, method):
    greedy = run(tiny_vl, method, BASE)
    assert (
        run(tiny_vl, method, BASE.replace(temperature=0.0, seed=5)).token_ids
        == greedy.token_ids
    )
    assert (
        run(tiny_vl, method, BASE.replace(temperature=1e-6, seed=5)).token_ids
        == greedy.token_ids
    )


@pytest.mark.parametrize("method", NAMES)
def test_a_fixed_seed_repeats_and_high_temperature_leaves_greedy(tiny_vl, method):
    greedy = run(tiny_vl, method, BASE).token_ids
    hot = BASE.replace(temperature=5.0, seed=11)
    first = run(tiny_vl, method, hot)
    assert (
        run(tiny_vl, method, hot).token_ids == first.token_ids
    )  # the same seed, the same answer
    others = [run(tiny_vl, method, hot.replace(seed=s)).token_ids for s in (12, 13)]
    assert first.token_ids != greedy and any(o != first.token_ids for o in others)
    # a batch decodes each row with its own generator: the row's answer does not depend on its neighbours
    batch = tiny_vl.generate_batch([random_request(3), random_request(4)], method, hot)
    assert batch[0].token_ids == first.token_ids


@pytest.mark.parametrize("method", NAMES)
def test_a_stop_string_cuts_the_text_as_vllm_does(tiny_vl, method):
    free = run(tiny_vl, method, BASE)
    text = free.text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip() and text.find(stop) > 0
    res = run(tiny_vl, method, BASE.replace(stop=stop))
    assert res.finish_reason == "stop" and res.text == text[: text.find(stop)]
    assert (
        free.token_ids[: len(res.token_ids)] == res.token_ids
    )  # the tokens up to the step that found it
    assert stop in tiny_vl.decode(res.token_ids) and len(res.token_ids) < len(
        free.token_ids
    )
    kept = run(
        tiny_vl, method, BASE.replace(stop=[stop], include_stop_str_in_output=True)
    )
    assert (
        kept.text == text[: text.find(stop) + len(stop)]
        and kept.finish_reason == "stop"
    )


def test_stop_string_search_window_and_order_are_vllms():
    assert check("abcde", 2, ("de",), False) == ("de", 3)
    assert (
        check("abcde", 1, ("cd",), False) is None
    )  # only the new text (+ len - 1 before it) is searched
    assert check("abcde", 1, ("de",), True) == ("de", -1)
    assert check("abcde", 5, ("d", "b"), False) == ("d", 3)  # the list's order, as vLLM


@pytest.mark.parametrize("method", ["asymspec", "floor", "sd"])
def test_min_tokens_holds_stop_tokens_back(tiny_vl, method):
    free = run(tiny_vl, method, BASE)
    stop = free.token_ids[1]
    early = run(tiny_vl, method, BASE.replace(stop_token_ids=(stop,)))
    assert early.finish_reason == "stop" and len(early.token_ids) <= 2
    held = run(tiny_vl, method, BASE.replace(stop_token_ids=(stop,), min_tokens=6))
    assert stop not in held.token_ids[:6] and len(held.token_ids) >= 6
