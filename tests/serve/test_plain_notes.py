"""What the server says in plain words (issue 35, item 10): the toy pair warns about an image that is no toy scene
(as the demo does), a refused `tools` is named without a Python repr, and vLLM's untrue min_p line reads as ours."""

import json
import logging

import httpx
import pytest
from serve_support import EXAMPLES, chat_body, data_url, served

TOY = {e["image"]: e for e in json.loads((EXAMPLES / "examples.json").read_text())}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(
        ["--backend", "hf", "--device", "cpu", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-notes") / "server.log",
    )


def ask(server, image: str, **fields) -> dict:
    body = chat_body(
        "What is the value of the tallest bar?",
        data_url(EXAMPLES / image),
        max_tokens=4,
        caption="A bar chart.",
        ocr="",
        **fields,
    )
    reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_toy_pair_warns_in_the_response_and_the_log_about_an_image_that_is_no_toy_scene(
    server,
):
    warnings = ask(server, "chart.png")["asymspec"]["warnings"]
    assert (
        len(warnings) == 1
        and "no toy scene" in warnings[0]
        and "--drafter and --verifier" in warnings[0]
    )
    assert "no toy scene" in server.tail(20000)
    assert (
        "warnings" not in ask(server, "toy-read.png")["asymspec"]
    )  # a toy scene: nothing to say


def test_a_streamed_answer_carries_the_warning_in_its_last_chunk(server):
    body = chat_body(
        "What is it?",
        data_url(EXAMPLES / "line.png"),
        max_tokens=2,
        caption="",
        ocr="",
        stream=True,
    )
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=body, timeout=300
    ) as reply:
        events = [
            json.loads(line[6:])
            for line in reply.iter_lines()
            if line.startswith("data: {")
        ]
    assert [e["asymspec"]["warnings"] for e in events if "asymspec" in e][0][
        0
    ].startswith("image 1 is no toy scene")


def test_the_warning_needs_the_toy_pair():
    from PIL import Image

    from asymspec_vl.serve.notes import answer_warnings

    chart, scene = (
        Image.open(EXAMPLES / "chart.png"),
        Image.open(EXAMPLES / "toy-read.png"),
    )
    assert (
        len(answer_warnings(True, [scene, chart])) == 1
        and "image 2" in answer_warnings(True, [scene, chart])[0]
    )
    assert answer_warnings(False, [chart]) == ()


@pytest.mark.parametrize(
    "fields, says",
    [
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "object"}},
                    }
                ]
            },
            "tools (a list of 1) is not served by asymspec-vl serve (no tool calling)",
        ),
        ({"n": 17}, "n=17 is not served"),
        ({"presence_penalty": 0.5}, "presence_penalty=0.5 is not served"),
    ],
)
def test_a_refused_field_is_named_in_plain_words_not_a_python_repr(fields, says):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from asymspec_vl.serve.http_errors import UnsupportedRequestError
    from asymspec_vl.serve.settings import ServeSettings
    from asymspec_vl.serve.translate import translate

    request = ChatCompletionRequest.model_validate(
        chat_body("Hi?", data_url(EXAMPLES / "toy-read.png"), **fields)
    )
    with pytest.raises(UnsupportedRequestError) as refused:
        translate(request, ServeSettings("embedded", "embedded"))
    message = str(refused.value)
    assert says in message, message
    assert (
        "Param(" not in message and "Definition(" not in message and "{'" not in message
    )


def test_vllms_min_p_line_reads_as_ours_once_on_an_asymspec_engine(monkeypatch):
    """vLLM warns "min_p and logit_bias parameters won't work with speculative decoding" while the runner is built;
    on an asymspec engine min_p is served, so the line says that instead, once per process."""
    from vllm_patches.hooks import log_notes

    monkeypatch.setattr(log_notes, "_said", set())
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelname, record.getMessage()))

    vllm_logger, handler = logging.getLogger(log_notes.VLLM_LOGGER), Keep()
    vllm_logger.addHandler(handler)
    try:
        for _ in range(2):  # e.g. two runners in one process
            with log_notes.asymspec_log_lines():
                vllm_logger.warning(
                    "min_p and logit_bias parameters won't work with speculative decoding."
                )
        vllm_logger.warning(
            "min_p and logit_bias parameters won't work with speculative decoding."
        )  # not asymspec
    finally:
        vllm_logger.removeHandler(handler)
    assert seen == [
        ("INFO", log_notes.OUR_MIN_P_LINE),
        (
            "WARNING",
            "min_p and logit_bias parameters won't work with speculative decoding.",
        ),
    ]
    assert "min_p is served" in log_notes.OUR_MIN_P_LINE
