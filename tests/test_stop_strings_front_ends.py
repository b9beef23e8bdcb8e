"""Stop strings through the front ends (issue 33): for random answers of the embedded pair (its toy examples,
asymspec / floor / the drafter), random stop sets drawn from the answer (overlapping, multi-token, absent),
min_tokens and include_stop_str_in_output, `vl.stream`'s pieces join to its result's text, which equals
generate()'s and vLLM's own detokenizer fed the same decoding steps (tests/core/test_stop_strings.py's oracle);
a real `asymspec-vl serve` (transformers backend) streams pieces that join to its plain answer, the library's."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_support import EXAMPLES, data_url, served
from stop_oracle import vllm_final

TOY = [
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"].startswith("toy-")
]
BASE = dict(K=2, max_new_tokens=20)
SLOW = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def request_of(example):
    from asymspec_vl import Request

    return Request(
        str(EXAMPLES / example["image"]),
        example["question"],
        caption=example["caption"],
    )


@st.composite
def cases(draw):
    example = draw(st.sampled_from(TOY[:3]))
    spans = st.lists(st.tuples(st.floats(0, 0.95), st.integers(1, 8)), max_size=3)
    return (
        example,
        draw(st.sampled_from(["asymspec", "floor", "drafter"])),
        draw(spans),
        draw(st.booleans()),
        draw(st.integers(0, 12)),
    )


def stops_of(text: str, spans) -> tuple[str, ...]:
    """Pieces of the answer (where spans say) and one string it lacks."""
    return tuple(
        s
        for s in (text[int(a * len(text)) : int(a * len(text)) + n] for a, n in spans)
        if s
    ) + ("§§",)


def answer_and_steps(vl, req, method, cfg):
    """The answer's tokens with no stop strings and the token count after each decoding step."""
    steps = []
    out = vl.generate(
        req.image,
        req.question,
        caption=req.caption,
        method=method,
        config=cfg,
        on_step=lambda rows: steps.append(len(rows[0].token_ids)),
    )
    return out, sorted(set(steps))


@SLOW
@given(case=cases())
def test_vl_stream_pieces_join_to_the_result_which_is_vllms_cut(vl, case):
    example, method, spans, include, min_tokens = case
    req = request_of(example)
    free, steps = answer_and_steps(vl, req, method, dict(BASE, min_tokens=min_tokens))
    stop = stops_of(free.text, spans)
    cfg = dict(
        BASE, min_tokens=min_tokens, stop=stop, include_stop_str_in_output=include
    )
    stream = vl.stream(
        req.image, req.question, caption=req.caption, method=method, config=cfg
    )
    pieces = list(stream)
    want = vllm_final(
        vl.pair.tokenizer, free.token_ids, steps, stop, include, min_tokens
    )[0]
    plain = vl.generate(
        req.image, req.question, caption=req.caption, method=method, config=cfg
    )
    assert "".join(pieces) == stream.result.text == plain.text == want
    assert stream.result.token_ids == plain.token_ids


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from openai import OpenAI

    for server in served(
        ["--backend", "hf", "--device", "cpu", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-stops") / "server.log",
    ):
        yield OpenAI(
            base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
        )


@SLOW
@given(case=cases())
def test_the_servers_stream_joins_to_its_answer_which_is_the_librarys(client, vl, case):
    check_server_stream(client, vl, *case)


def check_server_stream(client, vl, example, method, spans, include, min_tokens):
    """A served answer's stream joins to its plain answer, which is the library's (`vl`, transformers) with the
    same stops, min_tokens and include_stop_str_in_output, with the same finish reason."""
    req = request_of(example)
    free, _ = answer_and_steps(vl, req, method, dict(BASE, min_tokens=min_tokens))
    stop = list(stops_of(free.text, spans))
    ref = vl.generate(
        req.image,
        req.question,
        caption=req.caption,
        method=method,
        config=dict(
            BASE,
            min_tokens=min_tokens,
            stop=tuple(stop),
            include_stop_str_in_output=include,
        ),
    )
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": data_url(EXAMPLES / example["image"])},
                },
                {"type": "text", "text": example["question"]},
            ],
        }
    ]
    extra = {
        "caption": example["caption"],
        "ocr": "",
        "method": method,
        "min_tokens": min_tokens,
        "include_stop_str_in_output": include,
    }
    plain = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=20,
        stop=stop,
        extra_body=extra,
    )
    chunks = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=20,
        stop=stop,
        stream=True,
        extra_body=extra,
    )
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == plain.choices[0].message.content == ref.text
    assert plain.choices[0].finish_reason == ref.finish_reason
