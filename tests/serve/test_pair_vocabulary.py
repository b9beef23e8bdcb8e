"""The server says whether its pair is cross-family and what the two vocabularies share: the ready line, GET
/v1/models' `asymspec` object and each response's `asymspec.vocabulary` (the app in-process on the transformers
runner, the embedded pairs: `embedded` one family, `embedded-llama` two vocabularies)."""

import time

import pytest
from serve_support import EXAMPLES, chat_body, data_url


@pytest.fixture(scope="module", params=["embedded", "embedded-llama"])
def served(request):
    """(verifier name, the app's test client, the ready line) of a server on the embedded drafter and `verifier`."""
    import logging

    from starlette.testclient import TestClient

    from asymspec_vl.serve.app import create_app
    from asymspec_vl.serve.hf_runner import HFRunner
    from asymspec_vl.serve.settings import ServeSettings

    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log = logging.getLogger("asymspec_vl.serve.app")
    keep, level = Keep(), log.level
    log.addHandler(keep)
    log.setLevel(logging.INFO)
    settings = ServeSettings("embedded", request.param, backend="hf", device="cpu", K=2)
    try:
        with TestClient(create_app(settings, HFRunner.load)) as client:
            deadline = time.monotonic() + 300
            while client.get("/health").status_code != 200:
                assert time.monotonic() < deadline, "the server never became ready"
                time.sleep(0.2)
            ready = next(line for line in lines if "ready" in line)
            yield request.param, client, ready
    finally:
        log.removeHandler(keep)
        log.setLevel(level)


def expected(verifier: str) -> dict:
    from asymspec_vl.pair.defaults import embedded_models
    from asymspec_vl.pair.model_pair import ModelPair

    m = embedded_models(verifier)
    return ModelPair.load(m["drafter"], m["verifier"]).vocabulary.to_dict()


def test_the_ready_line_says_what_the_pair_shares(served):
    verifier, _, ready = served
    if verifier == "embedded":
        assert "same family: one vocabulary (426 tokens)" in ready
    else:
        shared = expected(verifier)["shared_tokens"]
        assert f"cross-family: {shared} shared tokens" in ready
        assert "answer end <|im_end|> -> <|eot_id|>" in ready


def test_v1_models_carries_the_pairs_vocabulary(served):
    verifier, client, _ = served
    card = client.get("/v1/models").json()["data"][0]
    assert card["asymspec"]["vocabulary"] == expected(verifier)
    assert card["asymspec"]["vocabulary"]["cross_family"] is (verifier != "embedded")


def test_each_response_carries_the_pairs_vocabulary(served):
    verifier, client, _ = served
    body = chat_body(
        "What is shown?",
        data_url(EXAMPLES / "toy-read.png"),
        max_tokens=3,
        caption="a chart",
        ocr="",
    )
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    vocabulary = reply.json()["asymspec"]["vocabulary"]
    assert vocabulary == expected(verifier)
    if verifier != "embedded":
        assert vocabulary["answer_end"] == {
            "drafter": "<|im_end|>",
            "verifier": "<|eot_id|>",
        }
