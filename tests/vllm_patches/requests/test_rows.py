"""vllm_patches.requests.rows on stand-in requests: a request's state as the registry creates it."""

import types

import torch

from vllm_patches.requests.request_args import (
    REQUEST_KEY,
    EngineFacts,
    make_extra_args,
    parse_request_args,
)
from vllm_patches.requests.rows import RequestRegistry

FACTS = EngineFacts(K=2, vocab_size=10, max_model_len=64)


def request(extra_args):
    """The runner's request state as the scheduler hands it over: the parsed request in its extra_args."""
    from vllm import SamplingParams

    parsed = {REQUEST_KEY: parse_request_args(extra_args, FACTS)} if extra_args else {}
    return types.SimpleNamespace(
        sampling_params=SamplingParams(temperature=0, extra_args=parsed),
        prompt_token_ids=[1, 2, 3],
    )


def test_a_requests_banned_ids_replace_the_engine_default():
    """banned given: those ids and no others are masked (the engine default is for requests that give none)."""
    from asymspec_vl import AsymSpecConfig

    registry = RequestRegistry(
        FACTS, (5, 6), torch.device("cpu"), (), lambda req_id: None
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=4)
    own = registry.add("own", request(make_extra_args("sd", cfg, banned=[2, 8])))
    default = registry.add("default", request(make_extra_args("sd", cfg)))
    assert own.failed is None and own.banned_ids == (2, 8)
    assert torch.equal(own.banned.nonzero().flatten(), torch.tensor([2, 8]))
    assert default.banned_ids == (5, 6)
