"""`asymspec-vl serve` on real-shape pairs (issue 43: tiny random models with the real tokenizers, rows, special ids
and chat templates; conftest.py's real_shapes), vLLM backend, no new flags: the cross-family `real-llama3` (a
Qwen3-VL drafter of 151,936 rows, a Llama-3 verifier of 128,256; the same-family `real-qwen3` by hand). A greedy chat
completion equals the library's answer on the transformers backend (token ids, text, logprobs), and the same request
streamed equals it (the text's pieces joined, each token's logprob): random weights over a real byte-level
vocabulary emit byte pieces of split UTF-8 characters, which a stream must hold back and join as the whole answer
does."""

import json

import pytest
from openai import OpenAI
from serve_support import EXAMPLES, chat_body, data_url, served

pytestmark = pytest.mark.vllm
TOY = next(
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"].startswith("toy-")
)
MAX_TOKENS = 16


# real-qwen3 ran by hand too: one more server (~110 s of CPU) is past the CI budget
@pytest.fixture(scope="module", params=["real-llama3"])
def real_server(request, real_shapes, tmp_path_factory):
    drafter, verifier = real_shapes.pair(request.param)
    log = tmp_path_factory.mktemp(f"serve-{request.param}") / "server.log"
    args = ["--drafter", str(drafter), "--verifier", str(verifier), "--ocr", "none"]
    for server in served([*args, "-K", "2", "--max-num-seqs", "4"], log):
        yield request.param, drafter, verifier, server


@pytest.fixture(scope="module")
def library(real_server):
    """The library on the server's pair (transformers backend, float32), loaded once."""
    from asymspec_vl import AsymSpecVL

    _, drafter, verifier, _ = real_server
    return AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(verifier), device="cpu", dtype="float32"
    )


@pytest.mark.parametrize("method", ["asymspec", "floor"])
def test_a_real_pair_served_answers_as_the_library_plain_and_streamed(
    real_server, library, method
):
    from asymspec_vl import AsymSpecConfig

    name, _, _, server = real_server
    vl = library
    assert vl.pair.vmap.identity == (name == "real-qwen3")
    image = EXAMPLES / TOY["image"]
    ask = dict(
        model="asymspec-vl",
        messages=chat_body(TOY["question"], data_url(image))["messages"],
        max_tokens=MAX_TOKENS,
        logprobs=True,
        top_logprobs=1,
        extra_body={
            "caption": TOY["caption"],
            "ocr": "",
            "method": method,
            "return_token_ids": True,
        },
    )
    ref = vl.generate(
        str(image),
        TOY["question"],
        caption=TOY["caption"],
        method=method,
        config=AsymSpecConfig(K=2, max_new_tokens=MAX_TOKENS, logprobs=1),
    )
    client = OpenAI(
        base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
    )
    choice = client.chat.completions.create(**ask).choices[0]
    assert (choice.token_ids, choice.message.content) == (ref.token_ids, ref.text)
    assert len(ref.token_ids) == MAX_TOKENS or ref.finish_reason == "stop"
    assert [x.logprob for x in choice.logprobs.content] == pytest.approx(
        [x.logprob for x in ref.logprobs], abs=1e-4
    )
    chunks = list(client.chat.completions.create(**ask, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    streamed = [
        (e.token, e.logprob)
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert text == choice.message.content
    assert streamed == [(e.token, e.logprob) for e in choice.logprobs.content]
