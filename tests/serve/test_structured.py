"""`asymspec-vl serve` on the vLLM CPU build with the stock `openai` client: response_format json_schema and vLLM's
structured_outputs, for the methods of the speculative engine (Floor too: SD's request in mode "floor"); every
answer parses and matches its schema."""

import json
import re

import jsonschema
import pytest
from serve_support import EXAMPLES, chat_body, data_url, served

pytestmark = pytest.mark.vllm

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["count"],
    "additionalProperties": False,
}
FLAGS = [
    "--drafter",
    "embedded",
    "--verifier",
    "embedded",
    "--ocr",
    "none",
    "--no-caption-cache",
    "--max-tokens",
    "64",
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from openai import OpenAI

    probe = chat_body(
        "Which number does the yellow circle carry?",
        data_url(EXAMPLES / "toy-read.png"),
        caption="",
        ocr="",
    )
    for server in served(
        FLAGS, tmp_path_factory.mktemp("serve") / "server.log", probe_body=probe
    ):
        yield OpenAI(
            base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
        )


def ask(client, method, **fields):
    body = chat_body(
        "Which number does the yellow circle carry?",
        data_url(EXAMPLES / "toy-read.png"),
    )
    return client.chat.completions.create(
        model="asymspec-vl",
        messages=body["messages"],
        max_tokens=24,
        extra_body={
            "method": method,
            "caption": "",
            "ocr": "",
            **fields.pop("extra", {}),
        },
        **fields,
    )


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd", "floor"])
def test_response_format_json_schema_answers_parse_and_match(client, method):
    answer = ask(
        client,
        method,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "count", "schema": SCHEMA},
        },
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_json_object_and_vllms_structured_outputs(client):
    text = (
        ask(client, "asymspec", response_format={"type": "json_object"})
        .choices[0]
        .message.content
    )
    assert isinstance(json.loads(text), dict)
    text = (
        ask(client, "floor", extra={"structured_outputs": {"regex": "\nyes|no"}})
        .choices[0]
        .message.content
    )
    assert re.fullmatch("\nyes|no", text)
