"""`asymspec-vl serve` end to end on the vLLM CPU build: the README's command for the embedded pair in a subprocess
on 127.0.0.1, the stock `openai` client and raw HTTP against it. Tokens equal `AsymSpecVL.generate`'s (asymspec,
floor, drafter; streamed and not), 16 concurrent valid and bad requests, the API key, a client disconnect, the
captioner path and its cache, the README's curl and openai examples, and SIGTERM (last: it stops the server)."""

import json
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_support import (
    EXAMPLES,
    ROOT,
    chat_body,
    check_completion_fields,
    check_stream_shape,
    data_url,
    metric,
    served,
)
from test_bad_input import bomb_png  # a PNG header declaring a huge image

pytestmark = pytest.mark.vllm

KEY = "test-key-1234"
EXAMPLE_TEXTS = json.loads((EXAMPLES / "examples.json").read_text())
TOY = [e for e in EXAMPLE_TEXTS if e["image"].startswith("toy-")]


def toy_body(**kw) -> dict:
    """The chat body of the first toy scene (its caption, no OCR text), with chat_body's options."""
    example = TOY[0]
    return chat_body(
        example["question"],
        data_url(EXAMPLES / example["image"]),
        caption=example["caption"],
        ocr="",
        **kw,
    )


TEST_FLAGS = [
    "--no-caption-cache",
    "--max-image-mb",
    "1",
    "--max-body-mb",
    "2",
    "--max-image-pixels",
    "4000000",
    "--max-tokens",
    "2000",
    "--drain-timeout",
    "120",
]


def readme_section() -> str:
    """The serve page of the manual (docs/serve.md), whose examples these tests run."""
    return (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme_section(), flags=re.S)


def readme_command() -> list[str]:
    """The README's command for the embedded pair, as arguments after `serve`."""
    line = next(
        ln
        for block in readme_blocks("bash")
        for ln in block.splitlines()
        if ln.startswith(".venv/bin/asymspec-vl serve --drafter embedded")
    )
    return shlex.split(line)[2:]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    probe = chat_body(
        "Which number does the yellow circle carry?",
        data_url(EXAMPLES / "toy-read.png"),
    )
    yield from served(
        readme_command() + TEST_FLAGS,
        tmp_path_factory.mktemp("serve") / "server.log",
        api_key=KEY,
        probe_body=probe,
    )


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def reference():
    """The library on the same pair (transformers backend): what the server must answer."""
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def messages(example) -> list:
    return chat_body(example["question"], data_url(EXAMPLES / example["image"]))[
        "messages"
    ]


def expected(reference, example, method, **cfg):
    from asymspec_vl import AsymSpecConfig

    return reference.generate(
        str(EXAMPLES / example["image"]),
        example["question"],
        caption=example["caption"],
        ocr=example["ocr"],
        method=method,
        config=AsymSpecConfig(**cfg),
    )


def test_while_loading_the_server_answers_503_with_an_error_object(server):
    health = [
        (status, body) for kind, status, body in server.loading if kind == "health"
    ]
    chats = [(status, body) for kind, status, body in server.loading if kind == "chat"]
    assert health and all(status == 503 for status, _ in health)
    assert chats == [
        (
            503,
            {
                "error": {
                    "message": "the models are loading; try again in a moment",
                    "type": "ServerNotReadyError",
                    "param": None,
                    "code": 503,
                }
            },
        )
    ]


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == ["asymspec-vl"]


@pytest.mark.parametrize("method", ["asymspec", "floor", "drafter"])
def test_openai_client_answers_are_the_librarys_tokens(client, reference, method):
    for example in TOY:
        ref = expected(reference, example, method, K=2, max_new_tokens=40)
        extra = {
            "caption": example["caption"],
            "ocr": example["ocr"],
            "method": method,
            "config": {"K": 2},
            "return_trace": True,
            "return_token_ids": True,
        }
        reply = client.chat.completions.create(
            model="asymspec-vl",
            messages=messages(example),
            max_tokens=40,
            extra_body=extra,
        )
        choice = reply.choices[0]
        assert (choice.token_ids, choice.message.content, choice.finish_reason) == (
            ref.token_ids,
            ref.text,
            ref.finish_reason,
        )
        assert [t["source"] for t in reply.asymspec["trace"]] == [
            t.source for t in ref.trace
        ]
        assert [t["text"] for t in reply.asymspec["trace"]] == [
            t.text for t in ref.trace
        ]
        s = reply.asymspec
        assert (s["steps"], s["drafted"], s["accepted"], s["emitted"]) == (
            ref.stats.steps,
            ref.stats.drafted,
            ref.stats.accepted,
            ref.stats.emitted,
        )
        assert s["fused"] == sum(t.source == "fused" for t in ref.trace)
        assert reply.usage.completion_tokens == len(ref.token_ids)

        chunks = list(
            client.chat.completions.create(
                model="asymspec-vl",
                messages=messages(example),
                max_tokens=40,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra,
            )
        )
        steps = [
            c for c in chunks if c.choices and getattr(c.choices[0], "token_ids", None)
        ]
        assert (
            "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            == ref.text
        )
        assert [i for c in steps for i in c.choices[0].token_ids] == ref.token_ids
        assert steps[-1].choices[0].finish_reason == ref.finish_reason
        assert [t["source"] for t in steps[-1].asymspec["trace"]] == [
            t.source for t in ref.trace
        ]
        assert (
            chunks[-1].usage.completion_tokens == len(ref.token_ids)
            and not chunks[-1].choices
        )
        assert (
            len(steps) <= ref.stats.steps
        )  # one chunk per engine step (steps may arrive together)
        if method == "asymspec":
            assert (
                max(len(c.choices[0].token_ids) for c in steps) > 1
            )  # a step's drafts arrive at once


@pytest.mark.parametrize("method", ["asymspec", "floor", "drafter"])
def test_logprobs_plain_and_streamed_are_the_librarys(client, reference, method):
    """logprobs=True, top_logprobs=3 on the vLLM engines: per token the library's (transformers) logprob within
    float tolerance, its distribution, 3 alternatives; the streamed entries are the plain answer's."""
    example = TOY[0]
    ref = expected(reference, example, method, K=2, max_new_tokens=24, logprobs=3)
    extra = {
        "caption": example["caption"],
        "ocr": example["ocr"],
        "method": method,
        "config": {"K": 2},
    }
    ask = dict(
        model="asymspec-vl",
        messages=messages(example),
        max_tokens=24,
        logprobs=True,
        top_logprobs=3,
        extra_body=extra,
    )
    reply = client.chat.completions.create(**ask)
    content = reply.choices[0].logprobs.content
    assert (
        "".join(e.token for e in content)
        == reply.choices[0].message.content
        == ref.text
    )
    assert [e.logprob for e in content] == pytest.approx(
        [x.logprob for x in ref.logprobs], abs=2e-3
    )
    assert [e.asymspec_distribution for e in content] == [
        x.distribution for x in ref.logprobs
    ]
    assert all(len(e.top_logprobs) == 3 for e in content)
    chunks = list(client.chat.completions.create(**ask, stream=True))
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in content
    ]


def test_the_default_K_is_the_servers(client, reference):
    example = TOY[0]
    ref = expected(reference, example, "asymspec", K=4, max_new_tokens=40)
    reply = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages(example),
        max_tokens=40,
        extra_body={"caption": example["caption"], "ocr": ""},
    )
    assert (
        reply.choices[0].message.content == ref.text
        and reply.asymspec["config"]["K"] == 4
    )
    assert reply.asymspec["drafted"] == ref.stats.drafted


def _bad_requests() -> dict:
    """name -> (body or raw bytes, headers, expected status, expected error type)."""
    toy = TOY[1]
    good_url = data_url(EXAMPLES / toy["image"])
    bomb = bomb_png(3000, 3000)

    def body(question=toy["question"], url=good_url, **fields):
        return chat_body(
            question, url, caption=toy["caption"], ocr="", max_tokens=24, **fields
        )

    return {
        "broken image": (
            body(url=data_url(b"\x89PNG\r\n\x1a\n but then nothing")),
            400,
            "InvalidImageError",
        ),
        "oversized image": (
            body(url=data_url(b"\0" * (2**20 + 10))),
            400,
            "ImageTooLargeError",
        ),
        "decompression bomb": (body(url=data_url(bomb)), 400, "ImageTooLargeError"),
        "empty question": (body(question="   "), 400, "EmptyQuestionError"),
        "five images": (body(url=[good_url] * 5), 400, "TooManyImagesError"),
        "prompt over the context": (
            chat_body("What?", good_url, caption="a red square " * 3000, ocr=""),
            400,
            "PromptTooLongError",
        ),
        "seventeen choices": (body(n=17), 400, "UnsupportedRequestError"),
        "unknown method": (body(method="beam"), 400, "ConfigError"),
        "unknown setting": (body(config={"gammma": 0.5}), 400, "ConfigError"),
        "oversized body": (
            body(padding="x" * (2 * 2**20 + 1000)),
            413,
            "BodyTooLargeError",
        ),
        "wrong model": (body(model="gpt-4o"), 404, "UnknownModelError"),
    }


def test_sixteen_concurrent_requests_valid_and_bad(server, reference):
    bad = _bad_requests()
    valid = [
        (TOY[i % 3], method)
        for i, method in enumerate(["asymspec", "floor", "drafter", "asymspec"])
    ]
    wrong_key = ("wrong key", 401, "AuthenticationError")

    def send(item):
        with httpx.Client(timeout=300) as http:
            if item == wrong_key:
                body = chat_body(
                    TOY[0]["question"],
                    data_url(EXAMPLES / TOY[0]["image"]),
                    caption="",
                    ocr="",
                )
                return http.post(
                    server.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": "Bearer not-the-key"},
                )
            if isinstance(item, tuple) and len(item) == 2:
                example, method = item
                body = chat_body(
                    example["question"],
                    data_url(EXAMPLES / example["image"]),
                    max_tokens=40,
                    caption=example["caption"],
                    ocr="",
                    method=method,
                    config={"K": 2},
                )
                return http.post(
                    server.url + "/v1/chat/completions",
                    json=body,
                    headers=server.headers,
                )
            return http.post(
                server.url + "/v1/chat/completions",
                json=bad[item][0],
                headers=server.headers,
            )

    items = valid + list(bad) + [wrong_key]
    assert len(items) == 16
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(send, items))
    for (example, method), reply in zip(valid, replies[: len(valid)]):
        assert reply.status_code == 200, reply.text
        ref = expected(reference, example, method, K=2, max_new_tokens=40)
        assert reply.json()["choices"][0]["message"]["content"] == ref.text
    for name, reply in zip(list(bad) + ["wrong key"], replies[len(valid) :]):
        status, kind = bad[name][1:] if name in bad else wrong_key[1:]
        assert (
            reply.status_code,
            reply.json()["error"]["type"],
            reply.json()["error"]["code"],
        ) == (status, kind, status), (name, reply.text)
    # the server still answers correctly, and counted the errors by type
    example = TOY[2]
    after = httpx.post(
        server.url + "/v1/chat/completions",
        headers=server.headers,
        timeout=300,
        json=chat_body(
            example["question"],
            data_url(EXAMPLES / example["image"]),
            max_tokens=40,
            caption=example["caption"],
            ocr="",
        ),
    )
    assert (
        after.json()["choices"][0]["message"]["content"]
        == expected(reference, example, "asymspec", K=4, max_new_tokens=40).text
    )
    text = httpx.get(server.url + "/metrics").text
    for kind in (
        "InvalidImageError",
        "EmptyQuestionError",
        "TooManyImagesError",
        "PromptTooLongError",
        "UnsupportedRequestError",
        "BodyTooLargeError",
        "UnknownModelError",
        "AuthenticationError",
    ):
        assert metric(text, "asymspec_errors_total", type=kind) >= 1, kind
    assert metric(text, "asymspec_errors_total", type="ImageTooLargeError") >= 2
    assert metric(text, "asymspec_acceptance_rate", method="asymspec") > 0
    assert metric(text, "asymspec_mean_accepted_length", method="asymspec") > 1
    assert metric(text, "asymspec_generated_tokens_total", method="floor") > 0


def test_a_declared_huge_body_is_refused_unread(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {10 * 2**30}\r\n\r\n".encode()
        )
        s.settimeout(60)
        reply = b""
        while b"BodyTooLargeError" not in reply and (
            chunk := s.recv(65536)
        ):  # the head and body may come apart
            reply += chunk
    text = reply.decode(errors="replace")
    assert text.startswith("HTTP/1.1 413") and "BodyTooLargeError" in text


def test_the_api_key_is_required(server):
    body = chat_body("What?", data_url(EXAMPLES / "toy-read.png"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        reply = httpx.post(
            server.url + "/v1/chat/completions", json=body, headers=headers
        )
        assert (
            reply.status_code == 401
            and reply.json()["error"]["type"] == "AuthenticationError"
        )
    assert httpx.get(server.url + "/v1/models").status_code == 401
    assert (
        httpx.get(server.url + "/v1/models", headers=server.headers).status_code == 200
    )


def test_a_client_that_disconnects_mid_stream_leaves_no_request_in_the_engine(server):
    def engines():
        text = httpx.get(server.url + "/metrics").text
        return (
            metric(
                text,
                "asymspec_engine_requests",
                what="unfinished",
                engine="speculative",
            ),
            metric(
                text,
                "asymspec_engine_requests",
                what="drafter_rows",
                engine="speculative",
            ),
            metric(
                text,
                "asymspec_requests_total",
                method="asymspec",
                finish_reason="disconnected",
            )
            or 0,
        )

    body = toy_body(
        max_tokens=1500,
        ignore_eos=True,
        stream=True,
    )  # about a minute of decoding on 2 cores
    gone_before = engines()[2]
    with httpx.Client(timeout=300) as http:
        with http.stream(
            "POST",
            server.url + "/v1/chat/completions",
            json=body,
            headers=server.headers,
        ) as reply:
            events = (line for line in reply.iter_lines() if line.startswith("data: "))
            next(events), next(events)  # the role, then the first step's tokens
            assert engines()[:2] == (1, 1)  # the request is in the engine
    deadline = time.monotonic() + 60
    while engines() != (0, 0, gone_before + 1) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert engines() == (0, 0, gone_before + 1)


def test_vllms_gauges_show_a_running_request_and_reset_after_its_abort(server):
    """vLLM's test_abort_metrics_reset, on this server: vllm:num_requests_running and vllm:kv_cache_usage_perc while
    a request decodes, zero after its client left, and vllm:request_success_total{finished_reason="abort"} + 1."""
    labels = {"model_name": "asymspec-vl", "engine": "0"}

    def gauges():
        text = httpx.get(server.url + "/metrics").text
        return (
            metric(text, "vllm:num_requests_running", **labels),
            metric(text, "vllm:num_requests_waiting", **labels),
            metric(text, "vllm:kv_cache_usage_perc", **labels),
            metric(
                text, "vllm:request_success_total", finished_reason="abort", **labels
            ),
        )

    body = toy_body(
        max_tokens=1500,
        ignore_eos=True,
        stream=True,
    )
    aborted = gauges()[3]
    with httpx.Client(timeout=300) as http:
        with http.stream(
            "POST",
            server.url + "/v1/chat/completions",
            json=body,
            headers=server.headers,
        ) as reply:
            events = (line for line in reply.iter_lines() if line.startswith("data: "))
            next(events), next(events)
            running, waiting, kv_usage, _ = gauges()
            assert (running, waiting) == (1, 0) and kv_usage > 0
    deadline = time.monotonic() + 60
    while gauges() != (0, 0, 0, aborted + 1) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert gauges() == (0, 0, 0, aborted + 1)


def test_the_servers_captioner_makes_the_ocr_and_caches_it(client):
    from asymspec_vl.captioners import EasyOCRCaptioner
    from asymspec_vl.demo.cli import DEFAULT_OCR_MIN_CONFIDENCE

    server_ocr = EasyOCRCaptioner(
        min_confidence=DEFAULT_OCR_MIN_CONFIDENCE
    )  # the server's default captioner
    chart = EXAMPLES / "chart.png"
    ocr = server_ocr.describe(str(chart)).ocr
    assert "Sales" in ocr
    msgs = chat_body("What is the value of the tallest bar?", data_url(chart))[
        "messages"
    ]
    replies = [
        client.chat.completions.create(
            model="asymspec-vl",
            messages=msgs,
            max_tokens=8,
            extra_body={"caption": "A bar chart.", "return_prompts": True},
        )
        for _ in range(2)
    ]
    for reply, hit in zip(replies, (False, True)):
        assert reply.asymspec["view"] == {
            "caption": {"from": "request"},
            "ocr": {"from": server_ocr.name, "cache_hit": hit},
        }
        assert f"Text in the image (OCR):\n{ocr}" in reply.asymspec["prompts"]["x_comp"]
        assert "A bar chart." in reply.asymspec["prompts"]["x_comp"]
    assert (
        replies[0].choices[0].message.content == replies[1].choices[0].message.content
    )


def test_the_readme_examples_run_against_the_server(server, monkeypatch, capsys):
    monkeypatch.setenv("ASYMSPEC_VL_API_KEY", KEY)
    monkeypatch.chdir(ROOT)
    port = f"127.0.0.1:{server.port}"
    curl = next(b for b in readme_blocks("bash") if "curl" in b).replace(
        "127.0.0.1:8000", port
    )
    run = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + curl],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["object"] == "chat.completion"
    (python,) = readme_blocks("python")
    exec(
        compile(python.replace("127.0.0.1:8000", port), "README.md (Serve)", "exec"), {}
    )
    out = capsys.readouterr().out
    assert "draft" in out or "fused" in out or "bonus" in out


def test_a_conversation_with_a_system_prompt_and_two_images_is_the_librarys_answer(
    client, reference
):
    """Two images in different user turns: the speculative engine's x_full and the drafter engine's prompt hold
    both (the drafter engine takes --max-images images a prompt)."""
    first, second = TOY[0], TOY[2]
    url = [data_url(EXAMPLES / e["image"]) for e in (first, second)]
    sent = [
        {"role": "system", "content": "Answer with a number."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url[0]}},
                {"type": "text", "text": first["question"]},
            ],
        },
        {"role": "assistant", "content": "126"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url[1]}},
                {"type": "text", "text": second["question"]},
            ],
        },
    ]
    library = [dict(m) for m in sent]
    library[1] = {
        "role": "user",
        "content": [
            {
                "type": "image",
                "image": str(EXAMPLES / first["image"]),
                "caption": first["caption"],
            },
            {"type": "text", "text": first["question"]},
        ],
    }
    library[3] = {
        "role": "user",
        "content": [
            {
                "type": "image",
                "image": str(EXAMPLES / second["image"]),
                "caption": second["caption"],
            },
            {"type": "text", "text": second["question"]},
        ],
    }
    for method in ("asymspec", "drafter"):
        ref = reference.generate_chat(library, method=method, K=2, max_new_tokens=24)
        reply = client.chat.completions.create(
            model="asymspec-vl",
            messages=sent,
            max_completion_tokens=24,
            extra_body={
                "caption": [first["caption"], second["caption"]],
                "ocr": ["", ""],
                "method": method,
                "config": {"K": 2},
                "return_token_ids": True,
            },
        )
        assert (reply.choices[0].token_ids, reply.choices[0].message.content) == (
            ref.token_ids,
            ref.text,
        ), method


def test_ignore_eos_runs_a_request_to_its_max_completion_tokens(client):
    """What vllm bench serve sends: every answer is exactly its budget long."""
    example = TOY[1]
    reply = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages(example),
        max_completion_tokens=30,
        extra_body={"caption": example["caption"], "ocr": "", "ignore_eos": True},
    )
    assert (reply.usage.completion_tokens, reply.choices[0].finish_reason) == (
        30,
        "length",
    )
    assert reply.metrics["speculative_decoding"]["num_draft_tokens"] > 0


def test_streams_and_answers_are_shaped_as_vllms(server):
    """On the vLLM backend as on hf (test_vllm_parity.py): the last chunk carries the last step's text, and a
    completion every field of vLLM's with None as null."""
    body = toy_body(
        max_tokens=6,
        ignore_eos=True,
    )
    url, headers = server.url + "/v1/chat/completions", server.headers
    whole = httpx.post(url, json=body, headers=headers, timeout=300).json()
    check_completion_fields(whole)
    with httpx.stream(
        "POST", url, json={**body, "stream": True}, headers=headers, timeout=300
    ) as reply:
        lines = [ln[6:] for ln in reply.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    check_stream_shape([json.loads(ln) for ln in lines[:-1]], whole)


def test_sigterm_drains_requests_in_flight_then_exits_zero(server):
    """Last: it stops the module's server."""
    body = toy_body(
        max_tokens=40,
        ignore_eos=True,
        stream=True,
        return_token_ids=True,
    )
    first, tokens, finish = threading.Event(), [], []

    def stream():
        with httpx.Client(timeout=300) as http:
            with http.stream(
                "POST",
                server.url + "/v1/chat/completions",
                json=body,
                headers=server.headers,
            ) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                    tokens.extend(choice.get("token_ids") or [])
                    finish.append(choice.get("finish_reason"))
                    if tokens:
                        first.set()

    reader = threading.Thread(target=stream)
    reader.start()
    assert first.wait(120)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    with pytest.raises(httpx.TransportError):  # no longer accepting
        httpx.get(server.url + "/health", timeout=5)
    reader.join(300)
    assert (
        len(tokens) == 40 and finish[-1] == "length"
    )  # the request in flight finished
    assert server.proc.wait(timeout=180) == 0
