"""Structured output without an engine: AsymSpecConfig.structured_output and its checks, what the vLLM backend sends
(SamplingParams.structured_outputs, never the engine-side config), the transformers backend's refusal, and the
server's mapping of response_format / structured_outputs (400 on the transformers backend)."""

import pytest

from asymspec_vl.core.config import AsymSpecConfig, as_config
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.structured import StructuredOutput, structured_output_of

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
}


@pytest.mark.parametrize(
    "value, kind",
    [
        ({"json": SCHEMA}, "json"),
        ({"json": '{"type": "string"}'}, "json"),
        ({"json_object": True}, "json_object"),
        ({"regex": "[0-9]+"}, "regex"),
        ({"choice": ["red", "blue"]}, "choice"),
        ({"grammar": 'root ::= "a"'}, "grammar"),
    ],
)
def test_each_kind_is_read_and_given_to_vllm_as_sent(value, kind):
    so = structured_output_of(value)
    assert so.kind == kind
    expected = (
        value[kind] if value[kind] != '{"type": "string"}' else {"type": "string"}
    )
    assert so.to_dict() == {kind: expected}
    assert getattr(so.sampling_params(), kind) == expected


@pytest.mark.parametrize(
    "value, says",
    [
        ("json", "exactly one of"),
        ({}, "exactly one of"),
        ({"json": SCHEMA, "regex": "a"}, "exactly one of"),
        ({"schema": SCHEMA}, "exactly one of"),
        ({"json": "{nope"}, "not JSON text"),
        ({"json": [1]}, "an object"),
        ({"json_object": 1}, "must be True"),
        ({"choice": []}, "non-empty list"),
        ({"choice": "red"}, "non-empty list"),
        ({"regex": ""}, "non-empty string"),
        ({"grammar": 5}, "non-empty string"),
    ],
)
def test_a_bad_structured_output_is_a_config_error_naming_the_field(value, says):
    with pytest.raises(ConfigError, match="structured_output") as e:
        AsymSpecConfig(structured_output=value)
    assert says in str(e.value)


def test_the_config_stays_hashable_compares_by_content_and_round_trips():
    a = AsymSpecConfig(structured_output={"json": SCHEMA})
    b = as_config({"structured_output": {"json": dict(reversed(list(SCHEMA.items())))}})
    assert (
        a == b
        and hash(a) == hash(b)
        and isinstance(a.structured_output, StructuredOutput)
    )
    assert as_config(a.to_dict()) == a
    assert (
        "structured_output" not in AsymSpecConfig().to_dict()
    )  # the fingerprints of earlier runs read the same


def test_the_engine_receives_the_grammar_in_sampling_params_not_in_extra_args():
    """vLLM's scheduler reads SamplingParams.structured_outputs; extra_args["asymspec"]["config"] never carries it,
    and an engine refuses it there (it would constrain nothing)."""
    from vllm_patches.requests.request_args import (
        EngineFacts,
        make_extra_args,
        parse_request_args,
    )

    cfg = AsymSpecConfig(structured_output={"json": SCHEMA})
    extra = make_extra_args("sd", cfg)
    assert "structured_output" not in extra["asymspec"]["config"]
    extra["asymspec"]["config"]["structured_output"] = {"json": SCHEMA}
    with pytest.raises(ConfigError, match="structured_output"):
        parse_request_args(extra, EngineFacts(K=4, vocab_size=512, max_model_len=4096))


def test_the_vllm_backend_sets_structured_outputs_for_every_method():
    import types

    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
    from asymspec_vl.core.vocab_align import VocabMap
    from asymspec_vl.inputs.prompts import EncodedRequest, EncodedView, Prompts

    backend = VLLMBackend.__new__(VLLMBackend)
    backend.pair = types.SimpleNamespace(
        banned_ids=lambda: [9],
        stop_ids=lambda cfg: {2},
        vmap=VocabMap.same_vocabulary(16),  # one vocabulary
    )
    view = EncodedView([1, 2, 3])
    r = EncodedRequest(Prompts("", "", ""), view, view, view)
    cfg = AsymSpecConfig(structured_output={"choice": ["red", "blue"]})
    from asymspec_vl.core.methods import METHODS
    from asymspec_vl.core.request_plan import RequestPlan

    for name, method in METHODS.items():
        mode = "plain" if method.engine != "speculative" else name
        params = backend._params(r, RequestPlan(method, cfg, mode=mode), room=8)
        assert params.structured_outputs.choice == ["red", "blue"], name


def test_the_transformers_backend_refuses_structured_output_by_name():
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.core.methods import METHODS

    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    with pytest.raises(
        ConfigError,
        match=r"structured_output \(json\) is served by the vLLM backend only",
    ):
        vl.generate(
            None,
            "q",
            full_context="a",
            compressed_context="b",
            structured_output={"json": SCHEMA},
        )
    with pytest.raises(
        ConfigError, match="served by the vLLM backend only"
    ):  # the backend, as the server calls it
        vl.backend.run(
            [],
            vl.backend.plan_request(
                METHODS["sd"], AsymSpecConfig(structured_output={"regex": "a"})
            ),
        )


# -- the server ------------------------------------------------------------------------------------
def _request(**fields):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], **fields}
    )


def _settings(backend="vllm"):
    from asymspec_vl.serve.settings import ServeSettings

    return ServeSettings("embedded", "embedded", backend=backend)


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, None),
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, {"json_object": True}),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": SCHEMA},
                }
            },
            {"json": SCHEMA},
        ),
        ({"structured_outputs": {"json": SCHEMA}}, {"json": SCHEMA}),
        ({"structured_outputs": {"regex": "[0-9]+"}}, {"regex": "[0-9]+"}),
        ({"structured_outputs": {"choice": ["a", "b"]}}, {"choice": ["a", "b"]}),
    ],
)
def test_response_format_and_structured_outputs_map_as_vllm_maps_them(fields, expected):
    from asymspec_vl.serve.structured_output import structured_output_of_request

    so = structured_output_of_request(_request(**fields), _settings())
    assert (so.to_dict() if so is not None else None) == expected


@pytest.mark.parametrize(
    "fields, says",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}},
            "json_schema.schema",
        ),
        (
            {"structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}},
            "disable_any_whitespace",
        ),
        (
            {
                "response_format": {"type": "json_object"},
                "structured_outputs": {"regex": "a"},
            },
            "not both",
        ),
        (
            {"structured_outputs": {"choice": []}},
            "structured_outputs: AsymSpecConfig.structured_output choice",
        ),
    ],
)
def test_what_is_not_served_is_refused_by_name(fields, says):
    from asymspec_vl.serve.http_errors import UnsupportedRequestError
    from asymspec_vl.serve.structured_output import structured_output_of_request

    with pytest.raises(UnsupportedRequestError, match=says):
        structured_output_of_request(_request(**fields), _settings())


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"structured_outputs": {"regex": "a"}}, "structured_outputs"),
    ],
)
def test_the_transformers_backend_answers_400_naming_the_field(fields, named):
    from asymspec_vl.serve.http_errors import (
        UnsupportedRequestError,
        error_body,
        status_of,
    )
    from asymspec_vl.serve.structured_output import structured_output_of_request

    with pytest.raises(
        UnsupportedRequestError, match=f"{named} is not supported on the 'hf' backend"
    ) as e:
        structured_output_of_request(_request(**fields), _settings("hf"))
    assert (
        status_of(e.value) == 400
        and error_body(e.value)["error"]["type"] == "UnsupportedRequestError"
    )


def test_the_chat_translation_puts_the_schema_in_the_jobs_config():
    from serve_support import EXAMPLES, chat_body, data_url

    from asymspec_vl.serve.translate import translate

    png = (EXAMPLES / "toy-read.png").read_bytes()
    body = chat_body(
        "q?",
        data_url(png),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "n", "schema": SCHEMA},
        },
    )
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    job = translate(ChatCompletionRequest.model_validate(body), _settings())
    assert job.cfg.structured_output.to_dict() == {"json": SCHEMA}
    with pytest.raises(ConfigError, match="response_format"):
        translate(
            ChatCompletionRequest.model_validate(
                chat_body(
                    "q?", data_url(png), config={"structured_output": {"regex": "a"}}
                )
            ),
            _settings(),
        )
