"""A cross-family pair behind the server with no new flags (issue 34): `--verifier embedded-llama` (the toy drafter
with the toy Llama verifier, two vocabularies) on the transformers backend answers as the library does, logprobs
in the verifier's ids; `generate` on the vLLM backend answers as on the transformers backend."""

import json
import subprocess
import sys

import pytest
from openai import OpenAI
from serve_support import EXAMPLES, chat_body, data_url, served

TOY = [
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"].startswith("toy-")
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(
        [
            "--backend",
            "hf",
            "--device",
            "cpu",
            "--ocr",
            "none",
            "-K",
            "2",
            "--verifier",
            "embedded-llama",
        ],
        tmp_path_factory.mktemp("serve-xfamily") / "server.log",
    )


def _served_and_library(vl, example, method, max_tokens, top_logprobs, **hot):
    """The chat completion's keyword arguments for one toy example (logprobs and token ids asked for) and the
    library's answer to the same request (K=2)."""
    from asymspec_vl import AsymSpecConfig

    ask = dict(
        model="asymspec-vl",
        messages=chat_body(example["question"], data_url(EXAMPLES / example["image"]))[
            "messages"
        ],
        max_tokens=max_tokens,
        logprobs=True,
        top_logprobs=top_logprobs,
        extra_body={
            "caption": example["caption"],
            "ocr": "",
            "method": method,
            "return_token_ids": True,
        },
        **hot,
    )
    ref = vl.generate(
        str(EXAMPLES / example["image"]),
        example["question"],
        caption=example["caption"],
        method=method,
        config=AsymSpecConfig(
            K=2, max_new_tokens=max_tokens, logprobs=top_logprobs, **hot
        ),
    )
    return ask, ref


def test_the_cross_family_pair_answers_as_the_library(server):
    from asymspec_vl import AsymSpecVL

    vl = AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded-llama")
    assert not vl.pair.vmap.identity
    client = OpenAI(
        base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
    )
    for example in TOY[:2]:
        for method in ("asymspec", "floor"):
            ask, ref = _served_and_library(vl, example, method, 24, 1)
            choice = client.chat.completions.create(**ask).choices[0]
            assert (choice.token_ids, choice.message.content) == (
                ref.token_ids,
                ref.text,
            ), (example["image"], method)
            assert [x.logprob for x in choice.logprobs.content] == pytest.approx(
                [x.logprob for x in ref.logprobs], abs=1e-4
            )


def _generate(backend: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "generate",
            "--backend",
            backend,
            "--verifier",
            "embedded-llama",
            "--image",
            str(EXAMPLES / TOY[0]["image"]),
            "--question",
            "q?",
            "--caption",
            "c",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_vllm_backend_answers_the_cross_family_pair_as_the_transformers_backend():
    hf, vllm = _generate("hf"), _generate("vllm")
    assert hf.returncode == 0 and vllm.returncode == 0, vllm.stderr[-2000:]
    answer = hf.stdout.strip().splitlines()[-1]
    assert answer and vllm.stdout.strip().splitlines()[-1] == answer


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    yield from served(
        [
            "--backend",
            "vllm",
            "--ocr",
            "none",
            "-K",
            "2",
            "--verifier",
            "embedded-llama",
            "--drafter-engine",
        ],
        tmp_path_factory.mktemp("serve-xfamily-vllm") / "server.log",
    )


@pytest.mark.vllm
@pytest.mark.parametrize(
    "method, sampled",
    [("drafter", False), ("drafter", True), ("floor", True)],
)
def test_the_vllm_server_answers_the_cross_family_pair_as_the_library(
    vllm_server, method, sampled
):
    """The drafter alone on the server's drafter engine (its answer and logprobs moved to the verifier's ids) and a
    sampled Floor (on the speculative engine), greedy and seeded, plain and streamed: the library's tokens
    (transformers backend) and logprobs."""
    from asymspec_vl import AsymSpecVL

    vl = AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded-llama")
    client = OpenAI(
        base_url=vllm_server.url + "/v1", api_key="none", max_retries=0, timeout=300
    )
    hot = {"temperature": 1.5, "seed": 7} if sampled else {}
    ask, ref = _served_and_library(vl, TOY[0], method, 16, 2, **hot)
    choice = client.chat.completions.create(**ask).choices[0]
    assert (choice.token_ids, choice.message.content) == (ref.token_ids, ref.text)
    assert [x.logprob for x in choice.logprobs.content] == pytest.approx(
        [x.logprob for x in ref.logprobs], abs=1e-4
    )
    streamed = [
        e
        for c in client.chat.completions.create(**ask, stream=True)
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in choice.logprobs.content
    ]


@pytest.fixture(scope="module")
def never_committed() -> int:
    """A verifier id of the embedded-llama pair off its map's shared set (not banned, not an end id)."""
    from asymspec_vl.pair.defaults import embedded_models
    from asymspec_vl.pair.model_pair import ModelPair

    models = embedded_models("embedded-llama")
    pair = ModelPair.load(models["drafter"], models["verifier"])
    banned = set(pair.banned_ids())
    return next(i for i in pair.unshared_ids(range(pair.vocab_size)) if i not in banned)


@pytest.mark.parametrize(
    "which", ["server", pytest.param("vllm_server", marks=pytest.mark.vllm)]
)
def test_stop_token_ids_the_pair_never_commits_are_refused_by_id(
    request, which, never_committed
):
    """Issue 47 item 4: a stop id off the shared set could never end an answer (it was accepted silently)."""
    import httpx

    server = request.getfixturevalue(which)
    body = chat_body("q?", data_url(EXAMPLES / TOY[0]["image"]), max_tokens=2)
    reply = httpx.post(
        server.url + "/v1/chat/completions",
        json={**body, "stop_token_ids": [never_committed], "caption": "c"},
        timeout=120,
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (
        error["type"] == "ConfigError"
        and f"holds [{never_committed}]" in (error["message"])
    )
