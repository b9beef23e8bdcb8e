"""A cross-family engine's request side on plain values (requests/engine_map.py, request_args.py): y moved to the
drafter's ids incrementally, what the engine refuses per request, x_comp_drafter parsed and bounded by the drafter's
vocabulary, banned ids by the verifier's, and the pool blocks admission counts for the drafter's own x_comp view."""

from types import SimpleNamespace

import pytest
import torch

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.vocab_align import VocabMap
from vllm_patches.hooks.scheduler_patch import full_view_blocks
from vllm_patches.requests.engine_map import cross_family_refusal, to_drafter_ids
from vllm_patches.requests.request_args import (
    AsymSpecRequest,
    EngineFacts,
    RequestArgsError,
    parse_request_args,
)

# drafter 10 ids, verifier 6: verifier id v is drafter id 9 - v for v < 5; verifier id 5 is unshared
VMAP = VocabMap(torch.tensor([9, 8, 7, 6, 5]), torch.arange(5), 10, 6)
FACTS = EngineFacts(K=2, vocab_size=10, max_model_len=64, verifier_vocab_size=6)


def test_y_moves_to_the_drafter_ids_incrementally_and_a_shorter_y_cuts_it():
    known: list[int] = []
    assert to_drafter_ids(VMAP, known, [0, 1]) == [9, 8]
    assert to_drafter_ids(VMAP, known, [0, 1, 4]) == [9, 8, 5] and known == [9, 8, 5]
    assert to_drafter_ids(VMAP, known, [0]) == [9]  # a held-back token
    with pytest.raises(ConfigError, match=r"\[5\] are outside the shared set"):
        to_drafter_ids(VMAP, known, [0, 5])


GREEDY = AsymSpecConfig(K=2)


def _request(mode, cfg=GREEDY, x_comp_drafter=None):
    return AsymSpecRequest(METHODS[mode], cfg, x_comp_drafter=x_comp_drafter)


@pytest.mark.parametrize(
    "request_, refused",
    [
        (None, "asymspec requests only"),
        (
            _request("floor", AsymSpecConfig(K=2, temperature=0.5)),
            None,
        ),  # every mode samples across the map
        (
            _request("asymspec", AsymSpecConfig(K=2, temperature=0.5), [1]),
            None,
        ),
        (_request("sd", AsymSpecConfig(K=2, temperature=0.5), [1]), None),
        (_request("asymspec"), "x_comp_drafter"),
        (_request("scd"), "x_comp_drafter"),
        (_request("asymspec", x_comp_drafter=[1, 2]), None),
        (_request("floor"), None),  # Floor reads no drafter logits
    ],
)
def test_what_a_cross_family_engine_refuses_per_request(request_, refused):
    err = cross_family_refusal(request_)
    if refused is None:
        assert err is None
    else:
        assert isinstance(err, ConfigError) and refused in str(err)


def _args(**over):
    return {"asymspec": {"mode": "sd", **over}}


def test_x_comp_drafter_is_parsed_in_the_drafter_vocabulary_and_banned_in_the_verifiers():
    parsed = parse_request_args(_args(x_comp_drafter=[9, 0], banned=[5]), FACTS)
    assert parsed.x_comp_drafter == [9, 0] and parsed.banned == (5,)
    with pytest.raises(RequestArgsError, match=r"x_comp_drafter holds .* \[10\]"):
        parse_request_args(_args(x_comp_drafter=[10]), FACTS)
    with pytest.raises(RequestArgsError, match="x_comp_drafter is empty"):
        parse_request_args(_args(x_comp_drafter=[]), FACTS)
    with pytest.raises(RequestArgsError, match=r"banned holds .* \[6\]"):
        parse_request_args(_args(banned=[6]), FACTS)


def test_admission_counts_the_drafters_own_x_comp_view_beside_x_full():
    request = SimpleNamespace(prompt_token_ids=[1] * 5, max_tokens=10)
    own = _request("sd", x_comp_drafter=[1] * 21)
    assert full_view_blocks(request, own, 2, 16) == 3  # ceil((21 + 10 + 3) / 16)
    both = _request("asymspec", x_comp_drafter=[1] * 21)
    both.x_full = [1] * 40
    assert (
        full_view_blocks(request, both, 2, 16) == 4 + 3
    )  # x_full's 53 tokens, then x_comp's
    assert (
        full_view_blocks(request, _request("floor", x_comp_drafter=[1] * 21), 2, 16)
        == 0
    )
