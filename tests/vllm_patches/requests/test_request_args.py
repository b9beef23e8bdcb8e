"""vllm_patches.requests.request_args edge cases on plain values: token-id bounds, image grids, what each request may
set."""

import pytest
import torch

from vllm_patches.requests.request_args import (
    EngineFacts,
    RequestArgsError,
    check_supported,
    parse_request,
    parse_request_args,
    with_sampling_params,
)

FACTS = EngineFacts(
    K=2, vocab_size=100, max_model_len=64, image_token_id=7, patch_dim=12, merge_size=2
)


def args(**over):
    base = {
        "mode": "asymspec",
        "x_full": [1, 2, 7, 7, 3],
        "pixel_values": torch.zeros(8, 12),
        "image_grid_thw": torch.tensor([[1, 2, 4]]),
    }
    return {"asymspec": {**base, **over}}


@pytest.mark.parametrize("field", ["x_full", "banned"])
def test_a_token_id_equal_to_the_vocabulary_size_is_refused(field):
    """Ids run 0..V-1: V itself would index past the drafter's embedding table."""
    parse_request_args(
        args(**{field: [1, 99, 7, 7, 3] if field == "x_full" else [99]}), FACTS
    )
    bad = [1, 100, 7, 7, 3] if field == "x_full" else [100]
    with pytest.raises(RequestArgsError, match=r"outside \[0, 100\): \[100\]"):
        parse_request_args(args(**{field: bad}), FACTS)


def test_video_like_grids_are_refused():
    """Qwen-VL images have t = 1; a grid with t = 2 (a video's, 2 frames: 16 patches, 4 merged tokens per
    frame... ) is not an image, even when its patch count matches the pixels."""
    from asymspec_vl.core.errors import InvalidImageError

    with pytest.raises(InvalidImageError, match="t = 1"):
        parse_request_args(
            args(
                pixel_values=torch.zeros(16, 12),
                image_grid_thw=torch.tensor([[2, 2, 4]]),
                x_full=[1, 7, 7, 7, 7, 3],
            ),
            FACTS,
        )


@pytest.mark.parametrize(
    "over",
    [
        {"repetition_penalty": 1.1},
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"logit_bias": {3: 1.0}},
        {"bad_words": ["x"]},
        {"allowed_token_ids": [1, 2]},
    ],
)
def test_asymspec_rows_refuse_logits_processing(over):
    """The methods' rules define greedy and sampled decoding, not penalties or logits processing: refused."""
    from vllm import SamplingParams

    check_supported(
        SamplingParams(
            temperature=0.7, top_p=0.9, top_k=5, min_p=0.1, seed=3, min_tokens=2
        )
    )
    check_supported(
        SamplingParams(temperature=0, logprobs=2)
    )  # served: core/logprobs.py's rule
    with pytest.raises(RequestArgsError, match="not penalties"):
        check_supported(SamplingParams(**{"temperature": 0, **over}))


def test_the_parsed_config_samples_as_the_sampling_params_say():
    """temperature, top_p, top_k, min_p, seed and min_tokens come from SamplingParams; below vLLM's greedy
    threshold (1e-5) the row decodes greedily, as vLLM's sampler decodes it (vLLM's SamplingParams raise a
    temperature in (0, 0.01) to 0.01 first); stop_ids are vLLM's stop set."""
    from vllm import SamplingParams

    from asymspec_vl.core.config import AsymSpecConfig

    hot = with_sampling_params(
        AsymSpecConfig(K=2),
        SamplingParams(
            temperature=0.8, top_p=0.9, top_k=-1, min_p=0.05, seed=7, min_tokens=3
        ),
    )
    assert (
        hot.temperature,
        hot.top_p,
        hot.top_k,
        hot.min_p,
        hot.seed,
        hot.min_tokens,
        hot.samples,
    ) == (0.8, 0.9, 0, 0.05, 7, 3, True)
    unseeded = [
        with_sampling_params(AsymSpecConfig(K=2), SamplingParams(temperature=0.8)).seed
        for _ in range(2)
    ]
    assert (
        None not in unseeded and unseeded[0] != unseeded[1]
    )  # drawn once, on the scheduler: every rank's
    cold = with_sampling_params(
        AsymSpecConfig(K=2), SamplingParams(temperature=0.0, seed=7)
    )
    assert (cold.temperature, cold.seed, cold.samples) == (0.0, None, False)
    tiny = with_sampling_params(
        AsymSpecConfig(K=2), SamplingParams(temperature=1e-6)
    )  # vLLM raises it to 0.01
    assert (tiny.temperature, tiny.samples) == (0.01, True)
    params = SamplingParams(temperature=0.5, stop_token_ids=[5, 3], extra_args=args())
    request = parse_request(params, FACTS)
    assert request.stop_ids == (3, 5) and request.cfg.temperature == 0.5


# -- one parse per request: the scheduler's, read by the workers ------------------------------------
def new_request(extra_args, prompt=(1, 2, 3), max_tokens=5):
    from vllm import SamplingParams
    from vllm.v1.request import Request

    return Request(
        "r",
        list(prompt),
        SamplingParams(temperature=0, max_tokens=max_tokens, extra_args=extra_args),
        None,
    )


def scheduler_on(facts=FACTS, usable=100, block=4):
    """A stand-in vLLM Scheduler after scheduler_patch.init; finished: (req_id, status) it was told to finish."""
    import types

    from vllm_patches.hooks.scheduler_patch import SchedulerState
    from vllm_patches.requests.pool_ledger import PoolLedger

    finished = []
    scheduler = types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        num_spec_tokens=facts.K,
        asymspec=SchedulerState(facts, PoolLedger(usable, block)),
        finish_requests=lambda req_id, status: finished.append((req_id, status)),
    )
    return scheduler, finished


def test_the_scheduler_parses_a_request_once_and_the_worker_reads_that_object(
    monkeypatch,
):
    """extra_args["asymspec"] is decoded once per request in the engine (it was four times: the scheduler's mode,
    K and x_full length, then the worker's parse): the parsed AsymSpecRequest rides to the worker in its place."""
    from asymspec_vl import AsymSpecConfig
    from vllm_patches.hooks import scheduler_patch
    from vllm_patches.requests import request_args
    from vllm_patches.requests.request_args import (
        KEY,
        REQUEST_KEY,
        AsymSpecRequest,
        make_extra_args,
    )
    from vllm_patches.requests.rows import RequestRegistry

    decoded = []
    real = request_args._raw_args
    monkeypatch.setattr(
        request_args, "_raw_args", lambda extra: decoded.append(1) or real(extra)
    )
    extra = make_extra_args("asymspec", AsymSpecConfig(K=1), x_full=[1, 2, 3, 4])
    request = new_request(extra)
    scheduler, finished = scheduler_on()
    scheduler_patch.add_request(lambda s, r: None, scheduler, request)
    assert not finished and len(decoded) == 1
    parsed = request.sampling_params.extra_args[REQUEST_KEY]
    assert (
        isinstance(parsed, AsymSpecRequest)
        and KEY not in request.sampling_params.extra_args
    )
    assert KEY in extra  # the client's dict is left alone
    assert (
        parsed.method.name == "asymspec"
        and parsed.K == 1
        and parsed.x_full == [1, 2, 3, 4]
    )
    registry = RequestRegistry(FACTS, (), torch.device("cpu"), (), lambda req_id: None)
    row = registry.add("r", request)
    assert (
        len(decoded) == 1
        and row.request is parsed
        and row.K == 1
        and row.request.reads_full_view
    )
    assert getattr(request, scheduler_patch.STATE_ATTR).stats.stats.accepted_at == [
        0
    ]  # the request's K = 1


@pytest.mark.parametrize("config, K", [({}, 2), ({"K": 1}, 1)])
def test_one_K_rule_the_requests_config_K_else_the_engines(config, K):
    from vllm_patches.hooks import scheduler_patch
    from vllm_patches.requests.request_args import REQUEST_KEY

    request = new_request({"asymspec": {"mode": "sd", "config": config}})
    scheduler, finished = scheduler_on()
    scheduler_patch.add_request(lambda s, r: None, scheduler, request)
    assert not finished and request.sampling_params.extra_args[REQUEST_KEY].K == K
    assert (
        len(getattr(request, scheduler_patch.STATE_ATTR).stats.stats.accepted_at) == K
    )


@pytest.mark.parametrize(
    "raw, error",
    [
        (
            {"mode": "sd", "config": {"K": 3}},
            "ConfigError: config K=3 exceeds the engine's num_speculative_tokens=2",
        ),
        ({"mode": "sd", "config": {"K": "two"}}, "ConfigError"),
        ({"mode": "fast"}, 'RequestArgsError: extra_args["asymspec"]["mode"]=\'fast\''),
        (
            {"mode": "asymspec"},
            'RequestArgsError: mode "asymspec" needs extra_args["asymspec"]["x_full"]',
        ),
    ],
)
def test_a_malformed_request_fails_at_admission_alone_with_a_typed_error_naming_the_field(
    raw, error
):
    """One K rule: a K above the engine's is an error (the scheduler used to fall back to the engine's K where
    the worker raised); the request finishes with the error and never reaches a worker."""
    from vllm.v1.request import RequestStatus

    from vllm_patches.hooks import scheduler_patch
    from vllm_patches.requests.request_args import REQUEST_KEY

    request = new_request({"asymspec": raw})
    scheduler, finished = scheduler_on()
    scheduler_patch.add_request(lambda s, r: None, scheduler, request)
    assert finished == [("r", RequestStatus.FINISHED_ERROR)]
    [(client, req_id, info)] = scheduler.asymspec.take_rejected()
    assert req_id == "r" and info["error"].startswith(error), info["error"]
    assert REQUEST_KEY not in request.sampling_params.extra_args


def test_a_parsed_request_survives_the_pickle_to_worker_processes():
    """vLLM's multiprocessing executor pickles the SchedulerOutput (shm_broadcast): the Method travels by name
    (its rule is a lambda), the tensors as tensors."""
    import pickle

    parsed = parse_request_args(args(), FACTS)
    back = pickle.loads(pickle.dumps(parsed))
    assert (
        back.method is parsed.method
        and back.cfg == parsed.cfg
        and back.x_full == parsed.x_full
    )
    assert torch.equal(back.pixel_values, parsed.pixel_values)


def test_a_plain_row_decodes_greedily_only_without_logits_processing():
    """decodes_greedily decides which plain rows the rules take greedily (the verifier's argmax) and which go to
    vLLM's own sampler: any penalty, bias, word list, allowed set or min_tokens is logits processing."""
    from vllm import SamplingParams

    from vllm_patches.requests.request_args import decodes_greedily

    assert decodes_greedily(
        SamplingParams(temperature=0, logprobs=2)
    ) and not decodes_greedily(None)
    for processing in (
        dict(temperature=0.5),
        dict(repetition_penalty=1.2),
        dict(presence_penalty=0.5),
        dict(frequency_penalty=0.5),
        dict(logit_bias={3: 1.0}),
        dict(bad_words=["x"]),
        dict(allowed_token_ids=[1, 2]),
        dict(min_tokens=2),
    ):
        assert not decodes_greedily(
            SamplingParams(**{"temperature": 0, **processing})
        ), processing
