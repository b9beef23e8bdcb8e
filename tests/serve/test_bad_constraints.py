"""Constraints the engine cannot compile, on a vLLM server started with the default structured-output settings
(vLLM's "auto" would fall back from xgrammar to another backend, whose compile error in the engine core's
scheduler killed the engine for every user): each is that request's 400 naming its field, on a connection the
server keeps open, and the engine serves the next request."""

import httpx
import pytest
from serve_support import EXAMPLES, chat_body, data_url, served

pytestmark = pytest.mark.vllm

FLAGS = [
    "--drafter",
    "embedded",
    "--verifier",
    "embedded",
    "--ocr",
    "none",
    "--no-caption-cache",
    "--max-tokens",
    "8",
]
CYCLE = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    "$ref": "#/$defs/a",
}
BAD = [
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "c", "schema": CYCLE},
            }
        },
        "response_format",
        "Circular $ref",
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "o", "schema": {"type": "objekt"}},
            }
        },
        "response_format",
        "objekt",
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "m", "schema": {"$ref": "#/$defs/x"}},
            }
        },
        "response_format",
        "$defs",
    ),
    ({"structured_outputs": {"regex": "(abc"}}, "structured_outputs", "parenthesis"),
    ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs", "EBNF"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(FLAGS, tmp_path_factory.mktemp("serve") / "server.log")


def test_constraints_that_cannot_compile_are_400s_and_the_engine_lives(server):
    body = chat_body(
        "Which number does the yellow circle carry?",
        data_url(EXAMPLES / "toy-read.png"),
        caption="",
        ocr="",
    )
    with httpx.Client(
        base_url=server.url, headers=server.headers, timeout=300
    ) as client:
        for fields, field, says in BAD:
            reply = client.post(
                "/v1/chat/completions", json={**body, "method": "floor", **fields}
            )
            assert reply.status_code == 400, (fields, reply.text)
            error = reply.json()["error"]
            assert error["message"].startswith(field) and says in error["message"], (
                error
            )
            assert reply.headers.get("connection") != "close"
        good = client.post("/v1/chat/completions", json={**body, "method": "asymspec"})
        assert good.status_code == 200, good.text
        assert client.get("/health").status_code == 200
