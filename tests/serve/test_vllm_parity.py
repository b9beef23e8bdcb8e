"""What vLLM's own OpenAI-server tests expect of a chat server (issue 35, item 13), on the transformers backend's
server: n > 1 choices seeded as vLLM seeds them, usage in every chunk with continuous_usage_stats, vLLM's /ping and
/invocations routes, vLLM's scheduler gauges and request counter in /metrics, vLLM's words for a seed out of range,
prompt_logprobs (the verifier's over its prompt, x_comp) in vLLM's form, and custom roles refused by name."""

import json
from types import SimpleNamespace

import httpx
import pytest
from serve_support import (
    EXAMPLES,
    chat_body,
    check_completion_fields,
    check_stream_shape,
    data_url,
    metric,
    served,
)

TOY = {e["image"]: e for e in json.loads((EXAMPLES / "examples.json").read_text())}
SCENE = TOY["toy-read.png"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(
        ["--backend", "hf", "--device", "cpu", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-parity") / "server.log",
    )


def body(**fields) -> dict:
    return chat_body(
        SCENE["question"],
        data_url(EXAMPLES / SCENE["image"]),
        max_tokens=6,
        caption=SCENE["caption"],
        ocr="",
        **fields,
    )


def post(server, path="/v1/chat/completions", **fields):
    return httpx.post(server.url + path, json=body(**fields), timeout=300)


def streamed(server, **fields) -> list[dict]:
    with httpx.stream(
        "POST",
        server.url + "/v1/chat/completions",
        json=body(stream=True, **fields),
        timeout=300,
    ) as reply:
        assert reply.status_code == 200
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_n_choices_are_n_requests_seeded_seed_plus_i_as_vllm_seeds_them(server):
    sampled = {"temperature": 1.0, "return_token_ids": True}
    reply = post(server, n=3, seed=11, **sampled).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    for i, choice in enumerate(reply["choices"]):
        alone = post(server, seed=11 + i, **sampled).json()["choices"][0]
        assert (choice["token_ids"], choice["message"]["content"]) == (
            alone["token_ids"],
            alone["message"]["content"],
        )
    assert reply["usage"]["completion_tokens"] == sum(
        len(c["token_ids"]) for c in reply["choices"]
    )
    assert (
        reply["usage"]["total_tokens"]
        == reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    )
    assert len(reply["asymspec"]["choices"]) == 3


def test_n_choices_stream_with_their_indexes_and_one_usage_chunk(server):
    events = streamed(
        server, n=2, stream_options={"include_usage": True}, return_token_ids=True
    )
    ids = {0: [], 1: []}
    for e in events:
        for c in e["choices"]:
            ids[c["index"]] += c.get("token_ids") or []
    finished = [
        c["index"] for e in events for c in e["choices"] if c.get("finish_reason")
    ]
    assert (
        sorted(finished) == [0, 1] and ids[0] == ids[1] and ids[0]
    )  # greedy: equal choices, as in vLLM
    usage = [e["usage"] for e in events if not e["choices"]]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == len(ids[0]) + len(
        ids[1]
    )


def test_continuous_usage_stats_put_the_usage_so_far_in_every_chunk(server):
    events = streamed(
        server,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        return_token_ids=True,
    )
    with_choices = [e for e in events if e["choices"]]
    assert all("usage" in e for e in events), events
    sent = 0
    for e in with_choices:
        sent += len(e["choices"][0].get("token_ids") or [])
        assert e["usage"]["completion_tokens"] == sent
        assert e["usage"]["total_tokens"] == e["usage"]["prompt_tokens"] + sent
    assert (
        events[-1]["usage"]["completion_tokens"] == sent
    )  # the last (usage) chunk: the whole answer


def test_vllms_ping_and_invocations_routes(server):
    assert httpx.get(server.url + "/ping").status_code == 200
    assert httpx.post(server.url + "/ping").status_code == 200
    reply = post(server, path="/invocations", return_token_ids=True)
    assert reply.status_code == 200 and reply.json()["object"] == "chat.completion"
    assert (
        reply.json()["choices"][0]["token_ids"]
        == post(server, return_token_ids=True).json()["choices"][0]["token_ids"]
    )
    other = httpx.post(
        server.url + "/invocations",
        json={"model": "asymspec-vl", "prompt": "Hi"},
        timeout=60,
    )
    assert (
        other.status_code == 400
        and "chat completion requests only" in other.json()["error"]["message"]
    )


def test_metrics_carry_vllms_scheduler_gauges_and_request_counter(server):
    post(server)
    text = httpx.get(server.url + "/metrics").text
    labels = {"model_name": "asymspec-vl", "engine": "0"}
    assert metric(text, "vllm:num_requests_running", **labels) == 0
    assert metric(text, "vllm:num_requests_waiting", **labels) == 0
    assert (
        metric(text, "vllm:request_success_total", finished_reason="length", **labels)
        >= 1
    )
    assert (
        metric(text, "vllm:request_success_total", finished_reason="abort", **labels)
        is not None
    )


def test_metrics_carry_vllms_token_counters_and_latency_histograms(server):
    """A finished request moves vLLM's token counters by its usage and adds one observation to each histogram."""
    labels = {"model_name": "asymspec-vl", "engine": "0"}
    names = [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_time_per_output_token_seconds_count",
    ]

    def read():
        text = httpx.get(server.url + "/metrics").text
        return [metric(text, n, **labels) for n in names]

    before = read()
    usage = post(server).json()["usage"]
    after = read()
    assert [a - b for a, b in zip(after, before)] == [
        usage["prompt_tokens"],
        usage["completion_tokens"],
        1,
        1,
        1,
    ]


def test_a_seed_out_of_range_is_refused_in_vllms_words(server):
    for seed, kind in (
        (2**63, "less_than_equal"),
        (-(2**63) - 1, "greater_than_equal"),
    ):
        reply = post(server, seed=seed)
        assert reply.status_code == 400 and kind in reply.json()["error"]["message"], (
            reply.text
        )


@pytest.mark.parametrize(
    "fields, says",
    [
        (
            {"messages": [{"role": "my-custom-role", "content": "what is 1+1?"}]},
            '"my-custom-role", which is not served',
        ),
        ({"prompt_logprobs": -1}, "-1, the whole vocabulary at every position, is not"),
        (
            {"prompt_logprobs": 1, "method": "drafter"},
            "the drafter alone runs no verifier",
        ),
        ({"prompt_logprobs": 1, "stream": True}, "not available when `stream=True`"),
    ],
)
def test_custom_roles_and_prompt_logprobs_that_cannot_be_are_refused_by_name(
    server, fields, says
):
    reply = httpx.post(
        server.url + "/v1/chat/completions", json={**body(), **fields}, timeout=60
    )
    error = reply.json()["error"]
    assert reply.status_code == 400 and says in error["message"], reply.text


def test_prompt_logprobs_are_the_verifiers_over_its_prompt_in_vllms_form(server):
    """As vLLM answers prompt_logprobs=k: None for the first prompt token, then per token a dict of the token and
    its k most probable alternatives, each {logprob, rank, decoded_token}; the values are the library's."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    reply = post(server, prompt_logprobs=2)
    assert reply.status_code == 200, reply.text
    got = reply.json()["prompt_logprobs"]
    ref = AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded").generate(
        str(EXAMPLES / SCENE["image"]),
        SCENE["question"],
        caption=SCENE["caption"],
        config=AsymSpecConfig(K=2, max_new_tokens=6, prompt_logprobs=2),
    )
    want = ref.prompt_logprobs
    assert (
        got[0] is None
        and want[0] is None
        and len(got) == len(want) == reply.json()["usage"]["prompt_tokens"] > 10
    )
    for entry, x in zip(got[1:], want[1:]):
        assert entry[str(x.token_id)]["rank"] == x.rank
        assert entry[str(x.token_id)]["logprob"] == pytest.approx(x.logprob, abs=1e-4)
        ranked = sorted((v["rank"], int(i)) for i, v in entry.items() if v["rank"] <= 2)
        assert [i for _, i in ranked] == [i for i, _ in x.top]
        assert all(isinstance(v["decoded_token"], str) for v in entry.values())


def test_a_stream_is_shaped_as_vllms_and_its_last_chunk_carries_the_last_text(
    server,
):
    check_stream_shape(streamed(server), post(server).json())


def test_a_completion_sends_every_field_of_vllms_with_none_as_null(server):
    for path in ("/v1/chat/completions", "/invocations"):
        check_completion_fields(post(server, path=path).json())
    ids = post(server, return_token_ids=True).json()
    assert len(ids["prompt_token_ids"]) == ids["usage"]["prompt_tokens"] > 10
    first = streamed(server, return_token_ids=True)[0]
    assert first["prompt_token_ids"] == ids["prompt_token_ids"]


def test_stop_reason_is_the_stop_string_or_token_and_none_for_eos():
    """vLLM's stop_reason: the stop string that cut the answer (with or without it in the text), the stop token
    id that ended it, None for the tokenizer's EOS or a length finish."""
    from asymspec_vl.core.config import AsymSpecConfig
    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.serve.responses import stop_reason

    def job(**cfg):
        return SimpleNamespace(cfg=AsymSpecConfig(**cfg))

    def decode(ids):
        return "".join(chr(96 + i) for i in ids)  # 1 -> "a", 2 -> "b", ...

    eos = 9
    stops = {"stop": ["x", "cd", "c"]}
    cases = [
        (job(), RowOutput([1, 2], finish_reason="length"), None),
        (job(), RowOutput([1, eos], finish_reason="stop"), None),
        (job(), RowOutput([1, 7], finish_reason="stop"), 7),
        (job(**stops), RowOutput([1, 2, 3, 4], finish_reason="stop", text="ab"), "cd"),
        (
            job(**stops, include_stop_str_in_output=True),
            RowOutput([1, 2, 3], finish_reason="stop", text="abc"),
            "c",
        ),
    ]
    for j, row, want in cases:
        assert stop_reason(j, row, decode, eos) == want, (row, want)


# -- units: no server -------------------------------------------------------------------------------------------
def test_choices_seed_each_child_as_vllms_parallel_sampling_does():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from asymspec_vl.serve.choices import choices_of
    from asymspec_vl.serve.settings import ServeSettings
    from asymspec_vl.serve.translate import translate

    for seed, seeds in ((7, [7, 8, 9]), (None, [None, None, None])):
        request = ChatCompletionRequest.model_validate(
            body(n=3, seed=seed, temperature=1.0)
        )
        children = choices_of(
            _prepared(translate(request, ServeSettings("embedded", "embedded")))
        )
        assert [c.job.cfg.seed for c in children] == seeds and [
            c.job.choice for c in children
        ] == [0, 1, 2]


def _prepared(j):
    from asymspec_vl.core.methods import METHODS
    from asymspec_vl.core.request_plan import RequestPlan
    from asymspec_vl.serve.chat import Prepared

    return Prepared(j, RequestPlan(METHODS[j.method], j.cfg), None, [], 0.0, 0.0)


def test_the_engine_core_utility_reads_vllms_scheduler_figures():
    from vllm_patches.hooks.engine_gauges import scheduler_gauges

    scheduler = SimpleNamespace(
        get_request_counts=lambda: (2, 5), kv_cache_manager=SimpleNamespace(usage=0.25)
    )
    assert scheduler_gauges(SimpleNamespace(scheduler=scheduler)) == {
        "running": 2,
        "waiting": 5,
        "kv_cache_usage": 0.25,
    }


def test_kv_cache_usage_is_published_when_the_runner_reads_it():
    from asymspec_vl.serve.metrics import ServeMetrics

    m = ServeMetrics("served")
    m.scheduler = {"running": 1, "waiting": 2, "kv_cache_usage": 0.5}
    m.ended("asymspec", "disconnected")
    text = m.render().decode()
    labels = {"model_name": "served", "engine": "0"}
    assert [
        metric(text, n, **labels)
        for n in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        )
    ] == [1, 2, 0.5]
    assert (
        metric(text, "vllm:request_success_total", finished_reason="abort", **labels)
        == 1
    )
