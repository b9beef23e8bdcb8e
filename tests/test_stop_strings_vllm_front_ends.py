"""Stop strings through the vLLM backend's front ends (issue 33), as tests/test_stop_strings_front_ends.py holds them
on the transformers backend: for random answers of the embedded pair (its toy examples), random stop sets drawn
from the answer (overlapping, multi-token, absent), min_tokens and include_stop_str_in_output, `vl.stream` on the
vLLM backend joins its pieces to its result's text, which equals its generate()'s and the transformers reference's
(vLLM's own output processor cuts the stops here); a real `asymspec-vl serve --backend vllm` streams pieces that
join to its plain answer, the same reference, with the same finish reason."""

import pytest
from hypothesis import given
from serve_support import served
from test_stop_strings_front_ends import (
    BASE,
    SLOW,
    answer_and_steps,
    cases,
    check_server_stream,
    request_of,
    stops_of,
)

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


@pytest.fixture(scope="module")
def vllm_vl():
    from asymspec_vl import AsymSpecVL

    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", backend="vllm", block_size=16
    )
    yield vl
    vl.close()


def reference(vl, req, method, stop, include, min_tokens):
    """The transformers backend's answer under the stops."""
    cfg = dict(
        BASE,
        min_tokens=min_tokens,
        stop=tuple(stop),
        include_stop_str_in_output=include,
    )
    return vl.generate(
        req.image, req.question, caption=req.caption, method=method, config=cfg
    )


@SLOW
@given(case=cases())
def test_vl_stream_on_vllm_joins_to_its_result_which_is_the_transformers_answer(
    vl, vllm_vl, case
):
    example, method, spans, include, min_tokens = case
    req = request_of(example)
    free, _ = answer_and_steps(vl, req, method, dict(BASE, min_tokens=min_tokens))
    stop = stops_of(free.text, spans)
    want = reference(vl, req, method, stop, include, min_tokens)
    cfg = dict(
        BASE, min_tokens=min_tokens, stop=stop, include_stop_str_in_output=include
    )
    stream = vllm_vl.stream(
        req.image, req.question, caption=req.caption, method=method, config=cfg
    )
    pieces = list(stream)
    plain = vllm_vl.generate(
        req.image, req.question, caption=req.caption, method=method, config=cfg
    )
    assert "".join(pieces) == stream.result.text == plain.text == want.text
    assert stream.result.token_ids == plain.token_ids == want.token_ids
    assert plain.finish_reason == want.finish_reason


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from openai import OpenAI

    for server in served(
        ["--backend", "vllm", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-stops-vllm") / "server.log",
    ):
        yield OpenAI(
            base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
        )


@SLOW
@given(case=cases())
def test_the_vllm_servers_stream_joins_to_its_answer_which_is_the_transformers_answer(
    client, vl, case
):
    example, method, spans, include, min_tokens = case
    method = (
        "asymspec" if method == "drafter" else method
    )  # the drafter alone needs --drafter-engine
    check_server_stream(client, vl, example, method, spans, include, min_tokens)
