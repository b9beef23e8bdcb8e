"""`asymspec-vl serve --backend hf`: the transformers runner (one batch at a time) behind the same app. Its answers
are the library's tokens for every method, streamed or not, when requests arrive together; SIGTERM drains and
exits 0."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
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
        ["--backend", "hf", "--device", "cpu", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-hf") / "server.log",
    )


@pytest.fixture(scope="module")
def reference():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def ask(client, example, method, stream=False):
    msgs = chat_body(example["question"], data_url(EXAMPLES / example["image"]))[
        "messages"
    ]
    reply = client.chat.completions.create(
        model="asymspec-vl",
        messages=msgs,
        max_tokens=32,
        stream=stream,
        extra_body={
            "caption": example["caption"],
            "ocr": "",
            "method": method,
            "return_token_ids": True,
        },
    )
    if not stream:
        return reply.choices[0].token_ids, reply.choices[0].message.content
    chunks = [c for c in reply if c.choices]
    return (
        [i for c in chunks for i in (getattr(c.choices[0], "token_ids", None) or [])],
        "".join(c.choices[0].delta.content or "" for c in chunks),
    )


def test_concurrent_requests_of_every_method_get_the_librarys_tokens(server, reference):
    from asymspec_vl import AsymSpecConfig

    client = OpenAI(
        base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
    )
    jobs = [
        (e, m, s)
        for m in ("asymspec", "floor", "drafter", "sd", "scd")
        for e in TOY[:2]
        for s in (False, True)
    ]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda j: ask(client, *j), jobs))
    for (example, method, _), (ids, text) in zip(jobs, got):
        ref = reference.generate(
            str(EXAMPLES / example["image"]),
            example["question"],
            caption=example["caption"],
            method=method,
            config=AsymSpecConfig(K=2, max_new_tokens=32),
        )
        assert (ids, text) == (ref.token_ids, ref.text), (example["image"], method)


def test_a_request_past_the_server_K_is_refused(server):
    body = chat_body("What?", data_url(EXAMPLES / "toy-read.png"), config={"K": 3})
    reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert (
        reply.status_code == 400
        and "over the server's K=2" in reply.json()["error"]["message"]
    )


def test_the_loop_marks_each_row_done_at_its_last_step(tiny_vl):
    """on_step sees a row's `done` set at the step after which it never grows (the hf runner sends that step
    with the finished row: vLLM's last chunk carries the last text), every row done at the last call."""
    from helpers import random_image

    from asymspec_vl import AsymSpecConfig, Request

    seen = []
    results = tiny_vl.generate_batch(
        [Request(random_image(1), "What?"), Request(random_image(2), "Why is it?")],
        config=AsymSpecConfig(K=2, max_new_tokens=9),
        on_step=lambda rows: seen.append([(len(r.token_ids), r.done) for r in rows]),
    )
    assert len(seen) > 1 and all(done for _, done in seen[-1])
    for r, result in enumerate(results):
        column = [step[r] for step in seen]
        first_done = next(i for i, (_, done) in enumerate(column) if done)
        assert all(done for _, done in column[first_done:])
        assert column[first_done][0] == len(result.token_ids)  # its last tokens were in
        if first_done:  # and not before them
            assert column[first_done - 1][0] < len(result.token_ids)
