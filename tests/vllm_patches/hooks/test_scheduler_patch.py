"""vllm_patches.hooks.scheduler_patch on stand-in requests: how much of the x_full pool a request may come to hold."""

import types

from asymspec_vl import AsymSpecConfig
from vllm_patches.hooks.scheduler_patch import full_view_blocks
from vllm_patches.requests.request_args import (
    EngineFacts,
    make_extra_args,
    parse_request_args,
)

FACTS = EngineFacts(K=2, vocab_size=100, max_model_len=64)


def request(x_full_len: int, prompt_len: int, max_tokens: int, mode: str = "asymspec"):
    from vllm import SamplingParams

    extra = make_extra_args(
        mode,
        AsymSpecConfig(K=2, max_new_tokens=max_tokens),
        x_full=list(range(1, x_full_len + 1)),
    )
    return types.SimpleNamespace(
        sampling_params=SamplingParams(temperature=0, extra_args=extra),
        prompt_token_ids=list(range(prompt_len)),
        max_tokens=max_tokens,
    )


def test_admission_reserves_the_whole_view_and_the_k_plus_1_lookahead():
    """x_full 10 + 5 answer tokens + K=2 drafts + 1 (a fused bonus's a_{K+1}) = 18 tokens: 5 blocks of 4 (without
    the lookahead 15 would take 4, and the last step's drafts would find the pool full)."""

    def blocks(r):
        return full_view_blocks(
            r, parse_request_args(r.sampling_params.extra_args, FACTS), 2, block_size=4
        )

    assert blocks(request(10, 6, 5)) == 5
    assert blocks(request(6, 10, 5)) == 5  # x_comp longer: its length
    assert blocks(request(10, 6, 5, "sd")) == 0  # no x_full view


def test_a_request_the_workers_failed_is_finished_and_its_error_logged(caplog):
    """vLLM's server answers finish_reason "error" with a bare 500 and never reads kv_transfer_params: the
    engine's log names the request and its error."""
    import logging

    from vllm.v1.request import RequestStatus

    from vllm_patches.hooks import scheduler_patch

    finished = []
    live = types.SimpleNamespace(client_index=0, is_finished=lambda: False)
    scheduler = types.SimpleNamespace(
        requests={"r1": live},
        finish_requests=lambda req_id, status: finished.append((req_id, status)),
    )
    with caplog.at_level(logging.WARNING, logger=scheduler_patch.__name__):
        failed = scheduler_patch.finish_failed(
            scheduler, {"r1": "RequestArgsError: bad", "gone": "X: y"}
        )
    assert failed == [(0, "r1", {"error": "RequestArgsError: bad"})]
    assert finished == [("r1", RequestStatus.FINISHED_ERROR)]
    assert "request r1 failed: RequestArgsError: bad" in caplog.text
