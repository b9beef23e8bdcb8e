"""`asymspec-vl serve` without a server: request translation and its refusals, image URLs and their caps, error
statuses, the streamed text deltas, settings and flags. The server end to end: test_serve_vllm.py, test_serve_hf.py."""

import io
import threading
from functools import partial
from http.server import HTTPServer, SimpleHTTPRequestHandler

import pytest
from PIL import Image
from serve_support import EXAMPLES, chat_body, data_url
from test_bad_input import bomb_png  # a PNG header declaring a huge image

PNG = (EXAMPLES / "toy-read.png").read_bytes()


def settings(**kw):
    from asymspec_vl.serve.settings import ServeSettings

    return ServeSettings("embedded", "embedded", **kw)


def job(body: dict, **kw):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from asymspec_vl.serve.translate import translate

    return translate(ChatCompletionRequest.model_validate(body), settings(**kw))


def body(**fields) -> dict:
    return chat_body("What number is on the red square?", data_url(PNG), **fields)


# -- translation -------------------------------------------------------------------------------------
def test_a_plain_request_becomes_asymspec_at_the_servers_K_and_token_cap():
    j = job(body(), K=3, max_tokens=77)
    assert (j.method, j.cfg.K, j.cfg.max_new_tokens, j.cfg.stop_token_ids) == (
        "asymspec",
        3,
        77,
        None,
    )
    assert (j.captions, j.ocrs, j.stream, j.return_trace, j.return_prompts) == (
        (None,),
        (None,),
        False,
        False,
        False,
    )
    (turn,) = j.turns
    assert (turn.role, turn.text) == ("user", "What number is on the red square?")
    assert j.image_urls[0].startswith("data:image/png;base64,")
    assert (j.cfg.temperature, j.cfg.stop, j.skip_special_tokens) == (
        0.0,
        (),
        True,
    )  # greedy unless asked


def test_extras_select_method_settings_view_and_what_comes_back():
    j = job(
        body(
            method="scd",
            caption="a caption",
            ocr="",
            config={"K": 2, "beta": 0.5, "gate": "fixed"},
            return_trace=True,
            return_prompts=True,
            max_tokens=9,
            stop_token_ids=[7],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert (
        j.method,
        j.captions,
        j.ocrs,
        j.return_trace,
        j.return_prompts,
        j.stream,
        j.include_usage,
    ) == ("scd", ("a caption",), ("",), True, True, True, True)
    assert (
        j.cfg.K,
        j.cfg.beta,
        j.cfg.gate,
        j.cfg.max_new_tokens,
        j.cfg.stop_token_ids,
    ) == (2, 0.5, "fixed", 9, (7,))


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 0},
        {"temperature": 0.0, "top_p": 1, "n": 1},
        {"seed": 3},
        {"logprobs": False},
        {"stop": []},
        {"user": "me"},
        {"tool_choice": "none"},
        {"presence_penalty": 0},
        {"response_format": {"type": "text"}},
    ],
)
def test_neutral_fields_are_accepted(fields):
    job(body(**fields))


def test_openai_and_vllm_sampling_and_stop_fields_are_served_as_vllm_serves_them():
    j = job(
        body(
            temperature=0.7,
            top_p=0.9,
            top_k=20,
            min_p=0.05,
            seed=11,
            stop="\n\n",
            min_tokens=2,
            include_stop_str_in_output=True,
            ignore_eos=True,
            skip_special_tokens=False,
            max_completion_tokens=12,
        )
    )
    c = j.cfg
    assert (c.temperature, c.top_p, c.top_k, c.min_p, c.seed, c.stop, c.min_tokens) == (
        0.7,
        0.9,
        20,
        0.05,
        11,
        ("\n\n",),
        2,
    )
    assert (
        c.include_stop_str_in_output,
        c.ignore_eos,
        c.max_new_tokens,
        j.skip_special_tokens,
    ) == (True, True, 12, False)
    assert job(body(stop=["a", "", "b"])).cfg.stop == ("a", "b")


def test_stop_token_ids_end_an_answer_beside_the_eos_tokens_unless_ignore_eos():
    from asymspec_vl.serve.translate import with_model_stops

    assert with_model_stops(
        job(body(stop_token_ids=[7])), {2, 3}
    ).cfg.stop_token_ids == (2, 3, 7)
    assert with_model_stops(
        job(body(stop_token_ids=[7], ignore_eos=True)), {2, 3}
    ).cfg.stop_token_ids == (7,)
    plain = job(body())
    assert (
        with_model_stops(plain, {2, 3}) is plain
    )  # None: the model's EOS tokens, as before


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"n": 17}, "n"),
        ({"n": 0}, "n"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"5": 1.0}}, "logit_bias"),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"repetition_penalty": 1.2}, "repetition_penalty"),
        ({"chat_template": "{{ x }}"}, "chat_template"),
        ({"vllm_xargs": {"a": "b"}}, "vllm_xargs"),
    ],
)
def test_what_the_server_does_not_serve_is_refused_by_name(fields, named):
    from asymspec_vl.serve.http_errors import UnsupportedRequestError, error_body

    with pytest.raises(UnsupportedRequestError, match=named) as refused:
        job(body(**fields))
    assert error_body(refused.value)["error"]["param"] == named


def test_logprobs_and_top_logprobs_become_the_configs_logprobs():
    """logprobs=true: each token's logprob (0 alternatives); top_logprobs=N (up to OpenAI's 20): N alternatives."""
    from asymspec_vl.core.errors import ConfigError

    assert (
        job(body()).cfg.logprobs is None
        and job(body(logprobs=False, top_logprobs=0)).cfg.logprobs is None
    )
    assert job(body(logprobs=True)).cfg.logprobs == 0
    assert job(body(logprobs=True, top_logprobs=3)).cfg.logprobs == 3
    assert job(body(logprobs=True, top_logprobs=20)).cfg.logprobs == 20
    with pytest.raises(
        Exception, match="logprobs"
    ):  # vLLM's request model: top_logprobs needs logprobs=true
        job(body(top_logprobs=2))
    with pytest.raises(
        ConfigError, match="logprobs"
    ):  # the request's own fields carry them, not config
        job(body(config={"logprobs": 2}))


def test_the_logprobs_content_joins_to_the_answer_and_names_each_distribution():
    from asymspec_vl.core.logprobs import TokenLogprob
    from asymspec_vl.pair.defaults import resolve
    from asymspec_vl.pair.model_pair import ModelPair
    from asymspec_vl.serve.responses import LogprobsContent

    tok = ModelPair.load(
        resolve("drafter", "embedded"), resolve("verifier", "embedded")
    ).tokenizer
    ids = tok.encode("12 + 7 = 19") + [tok.convert_tokens_to_ids("<|im_end|>")]
    lps = [
        TokenLogprob(i, -0.5, [(i, -0.5), (3, float("-inf"))], "fused" if j else "a")
        for j, i in enumerate(ids)
    ]
    content = LogprobsContent(tok)
    first, rest = content.push(lps[:2]), content.push(lps)
    assert content.push(lps) is None  # no new token: no object, never an empty list
    entries = first.content + rest.content
    assert (
        "".join(e.token for e in entries) == "12 + 7 = 19" and entries[-1].token == ""
    )  # the end token adds ""
    assert [e.asymspec_distribution for e in entries] == ["a"] + ["fused"] * (
        len(ids) - 1
    )
    assert (
        entries[0].bytes == list(entries[0].token.encode())
        and entries[0].top_logprobs[1].logprob == -9999.0
    )
    assert entries[0].model_dump()["asymspec_distribution"] == "a"


def test_unknown_extras_methods_and_settings_are_refused():
    from asymspec_vl.core.errors import ConfigError
    from asymspec_vl.serve.http_errors import UnsupportedRequestError

    with pytest.raises(UnsupportedRequestError, match="captions"):
        job(body(captions="x"))
    with pytest.raises(ConfigError, match="method='beam'"):
        job(body(method="beam"))
    with pytest.raises(ConfigError, match="gammma"):
        job(body(config={"gammma": 0.5}))
    with pytest.raises(ConfigError, match="gamma"):
        job(body(config={"gamma": 5}))
    with pytest.raises(ConfigError, match="over the server's K=4"):
        job(body(config={"K": 6}))
    with pytest.raises(ConfigError, match="use the request's own fields"):
        job(body(config={"max_new_tokens": 6}))
    with pytest.raises(ConfigError, match="use the request's own fields"):
        job(body(config={"temperature": 0.5}))
    with pytest.raises(UnsupportedRequestError, match="over this server's limit of 50"):
        job(body(max_tokens=51), max_tokens=50)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        job(body(max_tokens=0))
    with pytest.raises(ConfigError, match="temperature"):
        job(body(temperature=-1))
    with pytest.raises(UnsupportedRequestError, match="return_trace"):
        job(body(return_trace="yes"))


def conversation_body(**fields) -> dict:
    """A system prompt, a first user turn with an image, the assistant's answer, a second turn with an image."""
    url = data_url(PNG)
    return {
        "messages": [
            {"role": "system", "content": "Answer with one number."},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "What number is on the red square?"},
                ],
            },
            {"role": "assistant", "content": "7"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this one?"},
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "x"},
                ],
            },
        ],
        **fields,
    }


def test_a_conversation_becomes_its_turns_with_each_images_view():
    j = job(conversation_body(caption=["first", None], ocr=["", "ocr 2"]))
    assert [(t.role, t.text, len(t.image_urls)) for t in j.turns] == [
        ("system", "Answer with one number.", 0),
        ("user", "What number is on the red square?", 1),
        ("assistant", "7", 0),
        ("user", "And this one?\nx", 1),
    ]
    assert (j.captions, j.ocrs) == (("first", None), ("", "ocr 2"))
    developer = conversation_body()
    developer["messages"][0]["role"] = (
        "developer"  # OpenAI's newer name for the system prompt
    )
    assert job(developer).turns[0].role == "system"
    text_only = job({"messages": [{"role": "user", "content": "just text"}]})
    assert text_only.image_urls == [] and text_only.captions == ()


def test_the_conversation_is_checked_before_anything_runs():
    from asymspec_vl.core.errors import EmptyQuestionError, InvalidTextError
    from asymspec_vl.serve.http_errors import (
        TooManyImagesError,
        UnknownModelError,
        UnsupportedRequestError,
    )

    url = data_url(PNG)
    with pytest.raises(
        TooManyImagesError, match="5 images; this server reads at most 4"
    ):
        job(chat_body("q?", [url] * 5))
    job(chat_body("q?", [url] * 2, caption=["a", "b"]))
    with pytest.raises(TooManyImagesError, match="at most 1"):
        job(conversation_body(), max_images=1)
    with pytest.raises(
        UnsupportedRequestError, match="caption is one string for 2 images"
    ):
        job(conversation_body(caption="one"))
    with pytest.raises(
        UnsupportedRequestError, match="caption has 1 entries for 2 image"
    ):
        job(conversation_body(caption=["one"]))
    with pytest.raises(EmptyQuestionError):
        job(chat_body(" \n ", url))
    ends = conversation_body()
    ends["messages"].append({"role": "assistant", "content": "8"})
    with pytest.raises(
        UnsupportedRequestError, match="last message must be the user's"
    ):
        job(ends)
    for role, content in (
        ("tool", "x"),
        ("assistant", [{"type": "image_url", "image_url": {"url": url}}]),
    ):
        bad = conversation_body()
        bad["messages"].insert(
            1,
            {
                "role": role,
                "content": content,
                **({"tool_call_id": "1"} if role == "tool" else {}),
            },
        )
        with pytest.raises(UnsupportedRequestError, match=role):
            job(bad)
    audio = body()
    audio["messages"][0]["content"].append(
        {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
    )
    with pytest.raises(UnsupportedRequestError, match="input_audio"):
        job(audio)
    with pytest.raises(InvalidTextError, match="ocr"):
        job(body(ocr=12))
    with pytest.raises(UnknownModelError, match="gpt-4o"):
        job(body(model="gpt-4o"))


def test_errors_have_their_http_status_and_an_openai_error_object():
    from asymspec_vl.core.errors import (
        ConfigError,
        ImageTooLargeError,
        PromptTooLongError,
    )
    from asymspec_vl.serve import http_errors as E

    cases = {
        E.UnknownModelError("m"): 404,
        E.BodyTooLargeError("b"): 413,
        ImageTooLargeError("i"): 400,
        PromptTooLongError("p"): 400,
        ConfigError("c"): 400,
        E.TooManyImagesError("t"): 400,
        E.AuthenticationError("a"): 401,
        E.ServerNotReadyError("s"): 503,
        E.RequestTimeoutError("r"): 504,
        E.GenerationFailedError("g"): 500,
        RuntimeError("x"): 500,
    }
    for error, status in cases.items():
        assert E.status_of(error) == status, error
    assert E.error_body(ImageTooLargeError("too big")) == {
        "error": {
            "message": "too big",
            "type": "ImageTooLargeError",
            "param": None,
            "code": 400,
        }
    }


# -- image URLs ----------------------------------------------------------------------------------------
def fetch(url, **kw):
    import asyncio

    from asymspec_vl.serve.media import fetch_image

    return asyncio.run(fetch_image(url, settings(**kw)))


def test_data_urls_decode_to_the_images_pixels():
    image = fetch(data_url(PNG))
    assert image.tobytes() == Image.open(io.BytesIO(PNG)).convert("RGB").tobytes()


def test_data_urls_that_are_not_images_or_too_large_are_refused_before_decoding():
    from asymspec_vl.core.errors import ImageTooLargeError, InvalidImageError

    with pytest.raises(InvalidImageError, match="not an image file"):
        fetch(data_url(b"certainly not a png"))
    with pytest.raises(InvalidImageError, match="not valid base64"):
        fetch("data:image/png;base64,@@@@")
    with pytest.raises(InvalidImageError, match="base64-encoded"):
        fetch("data:image/png,rawbytes")
    with pytest.raises(InvalidImageError, match="text/plain"):
        fetch(data_url(PNG, "text/plain"))
    with pytest.raises(ImageTooLargeError, match="limit is 100"):
        fetch(data_url(PNG), max_image_bytes=100)
    with pytest.raises(
        ImageTooLargeError, match="3000x3000 = 9000000 pixels; the limit is 1000000"
    ):
        fetch(data_url(bomb_png(3000, 3000)), max_image_pixels=1_000_000)
    with pytest.raises(
        ImageTooLargeError, match="decompression bomb"
    ):  # Pillow's own guard, past our default cap
        fetch(data_url(bomb_png(30000, 30000)))


def test_local_files_only_inside_the_allowed_folder(tmp_path):
    from asymspec_vl.core.errors import InvalidImageError

    (tmp_path / "ok.png").write_bytes(PNG)
    url = (tmp_path / "ok.png").as_uri()
    with pytest.raises(InvalidImageError, match="--allowed-local-media-path"):
        fetch(url)
    assert (
        fetch(url, allowed_local_media_path=str(tmp_path)).size
        == Image.open(io.BytesIO(PNG)).size
    )
    with pytest.raises(InvalidImageError, match="outside the allowed folder"):
        fetch(
            (EXAMPLES / "toy-read.png").as_uri(), allowed_local_media_path=str(tmp_path)
        )
    with pytest.raises(InvalidImageError, match="outside the allowed folder"):
        fetch(
            url.replace("ok.png", "../ok.png"),
            allowed_local_media_path=str(tmp_path / "sub"),
        )


@pytest.fixture()
def http_images(tmp_path):
    """A local HTTP server with the toy image and a large file."""
    (tmp_path / "img.png").write_bytes(PNG)
    (tmp_path / "big.png").write_bytes(PNG + b"\0" * 200_000)
    server = HTTPServer(
        ("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_http_urls_only_from_allowed_hosts_and_capped_while_downloading(http_images):
    from asymspec_vl.core.errors import ImageTooLargeError, InvalidImageError
    from asymspec_vl.serve.media import host_allowed

    with pytest.raises(InvalidImageError, match="--allowed-media-domains"):
        fetch(http_images + "/img.png")
    with pytest.raises(InvalidImageError, match="'127.0.0.1' is not allowed"):
        fetch(http_images + "/img.png", allowed_media_domains=("example.com",))
    assert (
        fetch(http_images + "/img.png", allowed_media_domains=("127.0.0.1",)).size
        == Image.open(io.BytesIO(PNG)).size
    )
    with pytest.raises(InvalidImageError, match="HTTP 404"):
        fetch(http_images + "/missing.png", allowed_media_domains=("*",))
    with pytest.raises(ImageTooLargeError, match="over the limit"):
        fetch(
            http_images + "/big.png",
            allowed_media_domains=("*",),
            max_image_bytes=100_000,
        )
    assert host_allowed("img.example.com", ("example.com",)) and not host_allowed(
        "badexample.com", ("example.com",)
    )


# -- streamed text -------------------------------------------------------------------------------------
def test_text_deltas_join_to_the_decoded_answer_and_never_show_half_a_character():
    from transformers import AutoTokenizer

    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.pair.defaults import embedded_models
    from asymspec_vl.serve.responses import streamed_text

    tok = AutoTokenizer.from_pretrained(embedded_models()["verifier"])
    ids = tok.encode("9 × 14 = 126 ✓ 答案 é") + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]
    decode = partial(tok.decode, skip_special_tokens=True)
    assert any(
        decode(ids[:n]).endswith("\ufffd") for n in range(len(ids))
    )  # some tokens end mid-character
    deltas = streamed_text(decode, AsymSpecConfig())
    pieces = [deltas.push(ids[:n]) for n in range(1, len(ids))] + [
        deltas.end(decode(ids))
    ]
    assert "".join(pieces) == decode(ids) == "9 × 14 = 126 ✓ 答案 é"
    assert not any("\ufffd" in p for p in pieces)


# -- settings and flags --------------------------------------------------------------------------------
def test_settings_refuse_bad_limits_and_a_gpu_share_over_one():
    from asymspec_vl.core.errors import ConfigError

    for bad in (
        {"max_tokens": 0},
        {"request_timeout_s": -1},
        {"backend": "tgi"},
        {"api_key": ""},
        {"api_key": " "},
        {"drafter_memory": 1.5},
        {"allowed_media_domains": ("",)},
    ):
        with pytest.raises(ConfigError):
            settings(**bad)
    with pytest.raises(ConfigError, match="exceed the whole GPU"):
        settings(
            drafter_engine=True,
            drafter_memory=0.3,
            engine_kwargs={"gpu_memory_utilization": 0.8},
        )


def test_the_serve_command_turns_flags_into_settings(monkeypatch):
    from asymspec_vl.cli import build_parser
    from asymspec_vl.core.errors import ConfigError
    from asymspec_vl.serve.cli import settings_from_args

    monkeypatch.setenv("ASYMSPEC_VL_API_KEY", "from-env")
    args = build_parser().parse_args(
        [
            "serve",
            "--max-model-len",
            "2048",
            "--tensor-parallel-size",
            "2",
            "-K",
            "3",
            "--allowed-media-domains",
            "a.org, b.org",
            "--max-image-mb",
            "1",
        ]
    )
    s = settings_from_args(args)
    assert (s.backend, s.api_key, s.K, s.allowed_media_domains, s.max_image_bytes) == (
        "vllm",
        "from-env",
        3,
        ("a.org", "b.org"),
        2**20,
    )
    assert s.engine_kwargs == {"tensor_parallel_size": 2, "max_model_len": 2048}
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        settings_from_args(build_parser().parse_args(["serve", "--trust-remote-code"]))


# -- malformed requests and routes (the app with a stand-in runner: nothing past translation runs) ------------
@pytest.fixture()
def app_client():
    """The app on a stand-in runner, through Starlette's test client (no socket); exceptions become responses."""
    from types import SimpleNamespace

    from starlette.testclient import TestClient

    from asymspec_vl.serve.app import create_app

    async def healthy():
        return None

    from asymspec_vl.pair.shared_vocab import SharedVocabulary

    # the ready line names what the pair's vocabularies share
    vl = SimpleNamespace(
        pair=SimpleNamespace(vocabulary=SharedVocabulary(False, 8, 8, 8))
    )
    runner = SimpleNamespace(
        vl=vl, methods=("asymspec",), close=lambda: None, check_health=healthy
    )
    with TestClient(
        create_app(settings(), lambda s, loop: runner), raise_server_exceptions=False
    ) as client:
        yield client


def openai_error(reply, status: int, kind: str, says: str = "") -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"]) == (kind, status) and says in error[
        "message"
    ], error


def with_content(content) -> dict:
    return {"messages": [{"role": "user", "content": content}]}


IMAGE_PART = {"type": "image_url", "image_url": {"url": data_url(PNG)}}


@pytest.mark.parametrize(
    "raw, kind, says",
    [
        ("[1, 2]", "MalformedRequestError", "must be a JSON object"),
        (
            '[{"messages": [{"role": "user", "content": "hi"}]}]',
            "MalformedRequestError",
            "must be a JSON object",
        ),
        ('{"messages": 1}', "MalformedRequestError", "wrong type"),
        (
            '{"messages": [{"role": "user", "content": "hi"}], "structured_outputs": 1}',
            "MalformedRequestError",
            "wrong type",
        ),
        (
            '{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": "x"}',
            "MalformedRequestError",
            "wrong type",
        ),
        (
            with_content(["just a string", IMAGE_PART]),
            "MalformedRequestError",
            "must be an object with a 'type'",
        ),
        (
            with_content([1, IMAGE_PART]),
            "MalformedRequestError",
            "not a list of content parts",
        ),
        (
            with_content([{"type": "text", "text": 5}, IMAGE_PART]),
            "InvalidTextError",
            "must be a string, got int",
        ),
        (
            with_content([{"type": "text", "text": ["a"]}, IMAGE_PART]),
            "InvalidTextError",
            "got list",
        ),
        (
            with_content([{"type": "text", "text": None}, IMAGE_PART]),
            "InvalidTextError",
            "got NoneType",
        ),
        (  # issue 47 item 3: /invocations answered it with a 500 RecursionError
            '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "MalformedRequestError",
            "recursion limit exceeded",
        ),
        ("{not json", "MalformedRequestError", "Invalid JSON"),
    ],
)
def test_bodies_of_the_wrong_shape_get_a_400_error_object(app_client, raw, kind, says):
    """The same 400 on /v1/chat/completions and on vLLM's SageMaker route /invocations."""
    import json

    content = raw if isinstance(raw, str) else json.dumps(raw)
    for route in ("/v1/chat/completions", "/invocations"):
        reply = app_client.post(
            route, content=content, headers={"content-type": "application/json"}
        )
        openai_error(reply, 400, kind, says)


def test_unknown_routes_wrong_methods_and_the_docs_get_openai_error_objects(app_client):
    openai_error(
        app_client.get("/v2/nothing"),
        404,
        "RouteNotFoundError",
        "no route GET /v2/nothing",
    )
    openai_error(
        app_client.get("/v1/chat/completions"),
        405,
        "MethodNotAllowedError",
        "allowed: POST",
    )
    openai_error(
        app_client.post("/health"), 405, "MethodNotAllowedError", "allowed: GET"
    )
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        openai_error(app_client.get(path), 404, "RouteNotFoundError")
    assert (
        app_client.get("/health").status_code == 200
    )  # the routes themselves still answer


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://xn--a.com/x.png", "not a valid URL"),  # a punycode label IDNA refuses
        ("http://\u2603.com/x.png", "not a valid URL"),  # a non-ASCII host IDNA refuses
        ("http://a\u200b.org/x.png", "not a valid URL"),
        ("http://[::1/x.png", "not a valid URL"),
    ],
)
def test_image_urls_with_hosts_no_url_parser_takes_are_refused_as_invalid_images(
    url, says
):
    from asymspec_vl.core.errors import InvalidImageError

    with pytest.raises(InvalidImageError, match=says):
        fetch(url, allowed_media_domains=("*",))


def test_local_file_urls_with_nul_bytes_or_unreadable_names_are_refused_as_invalid_images(
    tmp_path,
):
    from asymspec_vl.core.errors import InvalidImageError

    (tmp_path / "ok.png").write_bytes(PNG)
    (tmp_path / "dir.png").mkdir()
    root = {"allowed_local_media_path": str(tmp_path)}
    with pytest.raises(InvalidImageError, match="NUL byte"):
        fetch(f"file://{tmp_path}/ok.png%00.txt", **root)
    with pytest.raises(InvalidImageError, match="cannot read"):
        fetch(
            f"file://{tmp_path}/{'a' * 300}.png", **root
        )  # a name over the file system's 255
    with pytest.raises(InvalidImageError, match="not a regular file"):
        fetch((tmp_path / "dir.png").as_uri(), **root)


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_api_key_is_refused_not_taken_as_no_key(monkeypatch, key):
    from asymspec_vl.cli import build_parser
    from asymspec_vl.core.errors import ConfigError
    from asymspec_vl.serve.cli import settings_from_args

    monkeypatch.setenv("ASYMSPEC_VL_API_KEY", key)
    with pytest.raises(ConfigError, match="API key is empty"):
        settings_from_args(build_parser().parse_args(["serve"]))
    monkeypatch.delenv("ASYMSPEC_VL_API_KEY")
    with pytest.raises(ConfigError, match="API key is empty"):
        settings_from_args(build_parser().parse_args(["serve", "--api-key", key]))


@pytest.mark.parametrize(
    "host, key, warned",
    [
        ("0.0.0.0", None, True),
        ("192.168.1.7", None, True),
        ("::", None, True),
        ("myhost.example", None, True),
        ("0.0.0.0", "k", False),
        ("127.0.0.1", None, False),
        ("127.1.2.3", None, False),
        ("::1", None, False),
        ("localhost", None, False),
    ],
)
def test_serve_warns_when_it_listens_beyond_loopback_without_a_key(
    monkeypatch, caplog, host, key, warned
):
    """`asymspec-vl serve --host H` up to uvicorn's run (stood in): the warning is logged before anything loads."""
    import signal

    import uvicorn

    from asymspec_vl.cli import main

    monkeypatch.delenv("ASYMSPEC_VL_API_KEY", raising=False)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    argv = ["serve", "--backend", "hf", "--host", host] + (
        ["--api-key", key] if key else []
    )
    with caplog.at_level("WARNING"):
        assert main(argv) == 0
    said = [r.getMessage() for r in caplog.records if "no API key" in r.getMessage()]
    assert bool(said) == warned, said
    if warned:
        assert f"listening on {host} with no API key" in said[0]


# -- what the mutants of tests/mutants/serve.toml change ---------------------------------------------------
def test_local_file_paths_are_judged_where_they_lead_not_as_written(tmp_path):
    from asymspec_vl.core.errors import InvalidImageError

    (tmp_path / "outside.png").write_bytes(PNG)
    root = tmp_path / "allowed"
    (root / "sub").mkdir(parents=True)
    (root / "link.png").symlink_to(tmp_path / "outside.png")
    (root / "in.png").write_bytes(PNG)
    allowed = {"allowed_local_media_path": str(root)}
    with pytest.raises(InvalidImageError, match="outside the allowed folder"):
        fetch(
            f"file://{root}/sub/../../outside.png", **allowed
        )  # starts inside the folder, as written
    with pytest.raises(InvalidImageError, match="outside the allowed folder"):
        fetch(f"file://{root}/link.png", **allowed)
    assert (
        fetch(f"file://{root}/sub/../in.png", **allowed).size
        == Image.open(io.BytesIO(PNG)).size
    )


def test_file_url_refusals_never_show_where_a_path_leads_on_the_server(tmp_path):
    """Issue 47 item 2: the refusal names the URL as sent, not the resolved path (a symlink's target, where "../"
    leads): the server's file layout is not the client's to read."""
    from asymspec_vl.core.errors import AsymSpecError

    secret, root = tmp_path / "secret", tmp_path / "allowed"
    secret.mkdir(), root.mkdir()
    (secret / "big.png").write_bytes(PNG)
    (root / "out.png").symlink_to(secret / "big.png")
    (root / "gone.png").symlink_to(root / "nothing.png")
    (root / "in.png").symlink_to(root / "big.png")
    (root / "big.png").write_bytes(PNG)
    allowed = {"allowed_local_media_path": str(root), "max_image_bytes": 10}
    said = []
    for name in ("out.png", "gone.png", "in.png", "../secret/big.png"):
        with pytest.raises(AsymSpecError) as e:
            fetch(f"file://{root}/{name}", **allowed)
        said.append(str(e.value))
    assert "outside the allowed folder" in said[0] and "no image file" in said[1]
    assert said[2].startswith("the image file is") and "outside" in said[3]
    for hidden in (secret / "big.png", root / "nothing.png", root / "big.png"):
        assert not any(str(hidden) in s for s in said), said


def test_a_data_url_is_capped_by_the_bytes_it_decodes_to():
    from asymspec_vl.core.errors import ImageTooLargeError

    image = PNG + b"\0" * ((1 - len(PNG)) % 3)  # len % 3 == 1: its base64 ends in "=="
    url = data_url(image)
    assert url.endswith("==") and len(url.split(",")[1]) > len(image)
    assert (
        fetch(url, max_image_bytes=len(image)).size == Image.open(io.BytesIO(PNG)).size
    )
    with pytest.raises(
        ImageTooLargeError,
        match=f"is {len(image)} bytes; the limit is {len(image) - 1}",
    ):
        fetch(url, max_image_bytes=len(image) - 1)


def test_a_redirect_is_not_followed_out_of_the_allowed_hosts(http_images):
    """127.0.0.1 is allowed and redirects to localhost (the same server, another host name), which is not."""
    from http.server import BaseHTTPRequestHandler

    from asymspec_vl.core.errors import InvalidImageError

    target = http_images.replace("127.0.0.1", "localhost") + "/img.png"

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert (
            fetch(target, allowed_media_domains=("localhost",)).size
            == Image.open(io.BytesIO(PNG)).size
        )
        with pytest.raises(InvalidImageError, match="HTTP 302"):
            fetch(
                f"http://127.0.0.1:{server.server_address[1]}/x.png",
                allowed_media_domains=("127.0.0.1",),
            )
    finally:
        server.shutdown()


def test_stop_token_ids_in_config_are_refused_and_max_completion_tokens_wins_over_max_tokens():
    from asymspec_vl.core.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"config \['stop_token_ids'\]: use the request's"
    ):
        job(body(config={"stop_token_ids": [3]}, stop_token_ids=[7]))
    assert job(body(max_completion_tokens=5, max_tokens=9)).cfg.max_new_tokens == 5
    assert job(body(max_tokens=9)).cfg.max_new_tokens == 9


@pytest.mark.parametrize(
    "method, view",
    [
        ("asymspec", "x_comp"),
        ("floor", "x_comp"),
        ("sd", "x_comp"),
        ("scd", "x_comp"),
        ("drafter", "x_question"),
    ],
)
def test_usage_counts_the_prompt_the_methods_engine_reads(method, view):
    from types import SimpleNamespace

    from asymspec_vl.serve.responses import usage

    lengths = {"x_full": 30, "x_comp": 20, "x_question": 7}
    enc = SimpleNamespace(view=lambda name: SimpleNamespace(ids=[0] * lengths[name]))
    u = usage(job(body(method=method)), enc, 4)
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (
        lengths[view],
        4,
        lengths[view] + 4,
    )


def test_metrics_count_drafted_and_accepted_tokens_apart():
    from serve_support import metric

    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.core.trace import Stats
    from asymspec_vl.serve.metrics import ServeMetrics

    m = ServeMetrics()
    m.finished(
        "asymspec",
        RowOutput(
            token_ids=[1] * 5,
            sources=["draft"] * 5,
            stats=Stats(
                steps=2, drafted=8, accepted=3, emitted=5, accepted_at=[2, 1, 0, 0]
            ),
        ),
    )
    text = m.render().decode()
    assert metric(text, "asymspec_drafted_tokens_total", method="asymspec") == 8
    assert metric(text, "asymspec_accepted_tokens_total", method="asymspec") == 3
    assert metric(text, "asymspec_generated_tokens_total", method="asymspec") == 5
    assert metric(text, "asymspec_steps_total", method="asymspec") == 2
    assert metric(text, "asymspec_acceptance_rate", method="asymspec") == 3 / 8
    assert metric(text, "asymspec_mean_accepted_length", method="asymspec") == 5 / 2


def test_vllms_spec_decode_counters_have_vllms_names_and_labels_and_count_speculative_methods_only():
    from serve_support import metric

    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.core.trace import Stats
    from asymspec_vl.serve.metrics import ServeMetrics

    m = ServeMetrics("my-model", K=4)
    for method in ("asymspec", "sd"):
        m.finished(
            method,
            RowOutput(
                token_ids=[1] * 5,
                sources=["draft"] * 5,
                stats=Stats(
                    steps=2, drafted=8, accepted=3, emitted=5, accepted_at=[2, 1, 0, 0]
                ),
            ),
        )
    m.finished("floor", RowOutput(token_ids=[1] * 4, stats=Stats(steps=4, emitted=4)))
    text = m.render().decode()
    labels = {"model_name": "my-model", "engine": "0"}
    assert metric(text, "vllm:spec_decode_num_drafts_total", **labels) == 4
    assert metric(text, "vllm:spec_decode_num_draft_tokens_total", **labels) == 16
    assert metric(text, "vllm:spec_decode_num_accepted_tokens_total", **labels) == 6
    assert [
        metric(
            text,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            position=str(i),
            **labels,
        )
        for i in range(4)
    ] == [4, 2, 0, 0]


def test_the_response_summarises_speculative_decoding_as_vllm_counts_it():
    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.core.trace import Stats
    from asymspec_vl.serve.responses import speculative_decoding

    row = RowOutput(
        token_ids=[1] * 9,
        sources=["draft"] * 6 + ["fused", "bonus", "fused"],
        stats=Stats(steps=4, drafted=12, accepted=5, emitted=9, accepted_at=[3, 2, 0]),
    )
    assert speculative_decoding(row) == {
        "num_spec_steps": 4,
        "num_draft_tokens": 12,
        "num_accepted_draft_tokens": 5,
        "mean_acceptance_length": 1 + 5 / 4,
        "draft_acceptance_rate": 5 / 12,
        "acceptance_histogram": [1, 1, 2, 0],
        "num_accepted_tokens_per_pos": [3, 2, 0],
        "num_fused_tokens": 2,
    }
    assert (
        speculative_decoding(RowOutput(token_ids=[1], stats=Stats(steps=1, emitted=1)))
        is None
    )


def stand_in_service(stream, **kw):
    """A ChatService on a runner whose stream is `stream(enc, plan)`, and a Prepared request for it."""
    import time
    from types import SimpleNamespace

    from asymspec_vl.core.methods import METHODS
    from asymspec_vl.core.request_plan import RequestPlan
    from asymspec_vl.serve.captioning import View, ViewMaker
    from asymspec_vl.serve.chat import ChatService, Prepared
    from asymspec_vl.serve.metrics import ServeMetrics

    runner = SimpleNamespace(
        stream=stream,
        vl=SimpleNamespace(
            decode=lambda ids: "x" * len(ids), pair=SimpleNamespace(tokenizer=None)
        ),
    )
    service = ChatService(settings(**kw), runner, ViewMaker(None), ServeMetrics())
    j = job(body(stream=True))
    enc = SimpleNamespace(view=lambda name: SimpleNamespace(ids=[5, 6, 7]))
    return service, Prepared(
        j,
        RequestPlan(METHODS[j.method], j.cfg),
        enc,
        [View()],
        time.monotonic(),
        10**9,
    )


def test_a_stream_closed_by_its_client_counts_as_disconnected():
    """The response's generator closed mid-stream (GeneratorExit at its yield), as Starlette closes it."""
    import asyncio

    from serve_support import metric

    from asymspec_vl.serve.runner import Progress

    async def endless(enc, plan):
        tokens = []
        while True:
            tokens.append(1)
            yield Progress(list(tokens))
            await asyncio.sleep(0)

    service, p = stand_in_service(endless)

    async def main():
        events = service.events(p, "asymspec-vl")
        assert "assistant" in await anext(events)
        assert '"content":"x"' in await anext(events)
        await events.aclose()

    asyncio.run(main())
    text = service.metrics.render().decode()
    assert (
        metric(
            text,
            "asymspec_requests_total",
            method="asymspec",
            finish_reason="disconnected",
        )
        == 1
    )
    assert metric(text, "asymspec_requests_in_flight") == 0


async def queued(runner, n: int) -> None:
    import asyncio

    while runner.jobs.qsize() < n:
        await asyncio.sleep(0.01)


def test_the_hf_runner_batches_only_requests_of_one_method_and_config():
    """Queued behind a running batch: asymspec at K=2 twice, floor at K=2, asymspec at K=3 -> three batches."""
    import asyncio
    from types import SimpleNamespace

    import torch

    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.core.methods import METHODS
    from asymspec_vl.core.request_plan import RequestPlan
    from asymspec_vl.serve.hf_runner import HFRunner

    started, release, batches = threading.Event(), threading.Event(), []

    def run(encs, plan, on_step=None):
        batches.append((plan.method.name, plan.K, [int(e.sum()) for e in encs]))
        started.set()
        release.wait(30)
        return [RowOutput(token_ids=[int(e.sum())]) for e in encs]

    runner = HFRunner(SimpleNamespace(backend=SimpleNamespace(run=run)))

    async def answer(value: int, method: str, K: int):
        stream = runner.stream(
            torch.full((3,), value), RequestPlan(METHODS[method], AsymSpecConfig(K=K))
        )
        return [p.token_ids async for p in stream][-1]

    async def main():
        first = asyncio.ensure_future(answer(1, "asymspec", 2))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        rest = [
            asyncio.ensure_future(answer(v, m, K))
            for v, m, K in (
                (2, "asymspec", 2),
                (3, "floor", 2),
                (4, "asymspec", 2),
                (5, "asymspec", 3),
            )
        ]
        await asyncio.wait_for(
            queued(runner, 4), 30
        )  # all four wait behind the first batch
        release.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest), 30)

    try:
        assert asyncio.run(main()) == [[3], [6], [9], [12], [15]]
        assert batches == [
            ("asymspec", 2, [3]),
            ("asymspec", 2, [6, 12]),
            ("floor", 2, [9]),
            ("asymspec", 3, [15]),
        ]
    finally:
        runner.close()


def test_the_hf_runner_keeps_decoding_a_batch_when_one_of_its_clients_leaves():
    import asyncio
    from types import SimpleNamespace

    import torch

    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.core.loop import RowOutput
    from asymspec_vl.core.methods import METHODS
    from asymspec_vl.core.request_plan import RequestPlan
    from asymspec_vl.serve.hf_runner import HFRunner

    busy, release, left, steps = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
        [],
    )

    def run(encs, plan, on_step=None):
        rows = [RowOutput(token_ids=[int(e.sum())]) for e in encs]
        if plan.method.name == "floor":  # the batch the two others queue behind
            busy.set()
            release.wait(30)
            return rows
        for n in range(3):
            on_step(rows)
            steps.append((len(encs), n))
            if n == 0:
                left.wait(30)  # the first client leaves after its first step
        return rows

    runner = HFRunner(SimpleNamespace(backend=SimpleNamespace(run=run)))

    async def main():
        cfg = AsymSpecConfig(K=2)
        blocker = asyncio.ensure_future(
            anext(
                runner.stream(torch.full((3,), 9), RequestPlan(METHODS["floor"], cfg))
            )
        )
        await asyncio.get_running_loop().run_in_executor(None, busy.wait, 30)
        asymspec = RequestPlan(METHODS["asymspec"], cfg)
        leaving = runner.stream(torch.full((3,), 1), asymspec)
        staying = runner.stream(torch.full((3,), 2), asymspec)

        async def stay():
            return [p async for p in staying]

        kept = asyncio.ensure_future(stay())
        first = asyncio.ensure_future(anext(leaving))
        await asyncio.wait_for(queued(runner, 2), 30)  # both wait behind the blocker
        release.set()
        await asyncio.wait_for(first, 30)
        await leaving.aclose()
        left.set()
        await blocker
        return await asyncio.wait_for(kept, 30)

    try:
        got = asyncio.run(main())
        assert (
            steps == [(2, 0), (2, 1), (2, 2)]
            and got[-1].row is not None
            and got[-1].token_ids == [6]
        )
    finally:
        runner.close()


def test_the_media_fetch_timeout_bounds_the_whole_download_not_each_read():
    """An allowed host that sends its 30 bytes one every 0.2 s (6 s in all) never idles for a second."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from asymspec_vl.core.errors import InvalidImageError

    class Dribble(BaseHTTPRequestHandler):
        def do_GET(self):
            import time

            self.send_response(200)
            self.send_header("Content-Length", "30")
            self.end_headers()
            try:
                for _ in range(30):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass  # the client left

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dribble)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(InvalidImageError, match="took over the server's 1.0 s"):
            fetch(
                f"http://127.0.0.1:{server.server_address[1]}/slow.png",
                allowed_media_domains=("127.0.0.1",),
                media_fetch_timeout_s=1.0,
            )
    finally:
        server.shutdown()


def test_the_serve_command_takes_the_connection_limits():
    from asymspec_vl.cli import build_parser
    from asymspec_vl.serve.cli import settings_from_args

    s = settings_from_args(
        build_parser().parse_args(
            [
                "serve",
                "--header-timeout",
                "4",
                "--body-timeout",
                "9",
                "--max-connections",
                "12",
                "--drain-timeout",
                "7",
            ]
        )
    )
    assert (
        s.header_timeout_s,
        s.body_timeout_s,
        s.max_connections,
        s.drain_timeout_s,
    ) == (4, 9, 12, 7)


def slow_stream(pause: float):
    async def stream(enc, plan):
        import asyncio

        from asymspec_vl.serve.runner import Progress

        tokens = []
        while True:
            tokens.append(1)
            yield Progress(list(tokens))
            await asyncio.sleep(pause)

    return stream


def test_a_request_past_the_request_timeout_is_aborted_with_504():
    import asyncio

    from asymspec_vl.serve.http_errors import RequestTimeoutError

    service, p = stand_in_service(slow_stream(0.05), request_timeout_s=0.5)

    async def main():
        p.deadline = asyncio.get_running_loop().time() + 0.5
        with pytest.raises(RequestTimeoutError, match="timeout of 0.5 s"):
            await service.answer(p, "asymspec-vl")

    asyncio.run(main())


def test_requests_running_when_the_drain_expires_end_with_an_error_object_and_streams_with_done():
    import asyncio
    import json

    from asymspec_vl.serve.http_errors import ServerShuttingDownError

    service, p = stand_in_service(slow_stream(0.01), drain_timeout_s=0.3)

    async def main():
        async def streamed():
            return [e async for e in service.events(p, "asymspec-vl")]

        events = asyncio.ensure_future(streamed())
        answer = asyncio.ensure_future(service.answer(p, "asymspec-vl"))
        await asyncio.sleep(0.1)
        service.begin_drain()
        with pytest.raises(
            ServerShuttingDownError, match="drain timeout of 0.3 s expired"
        ):
            await asyncio.wait_for(answer, 10)
        return await asyncio.wait_for(events, 10)

    events = asyncio.run(main())
    assert events[-1] == "data: [DONE]\n\n"
    assert json.loads(events[-2][6:])["error"]["type"] == "ServerShuttingDownError"
    assert len(events) > 3  # tokens were streamed before the drain ended it


def test_streamed_text_holds_back_what_could_begin_a_stop_string_and_cuts_at_it():
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.core.stop_strings import StopStrings
    from asymspec_vl.serve.responses import streamed_text

    text = "12 + 3 = 15. END of it"
    decode = lambda ids: text[: len(ids)]  # noqa: E731 (one character a token)
    for cfg, want in (
        (AsymSpecConfig(stop=("END", "?!")), "12 + 3 = 15. "),
        (
            AsymSpecConfig(stop="END", include_stop_str_in_output=True),
            "12 + 3 = 15. END",
        ),
    ):
        watch, deltas, pieces = (
            StopStrings(decode, cfg.stop, cfg.include_stop_str_in_output, 0),
            streamed_text(decode, cfg),
            [],
        )
        for n in range(1, len(text) + 1):
            pieces.append(deltas.push(list(range(n))))
            if watch.after_step(list(range(n)), n - 1):
                break
        pieces.append(deltas.end(watch.text))
        assert "".join(pieces) == watch.text == want
        if not cfg.include_stop_str_in_output:
            assert not any(
                "E" in p for p in pieces
            )  # not even the stop string's first letter went out


def test_a_requests_images_are_charged_to_its_pixel_budget_before_they_are_decoded(
    monkeypatch,
):
    """Two images at the per-image cap in one request are refused from the second one's header (a 400 naming
    --max-request-pixels), before it is decoded; one alone is read."""
    import asyncio

    from asymspec_vl.cli import build_parser
    from asymspec_vl.core.errors import ImageTooLargeError
    from asymspec_vl.serve import media
    from asymspec_vl.serve.cli import settings_from_args

    s = settings(max_image_pixels=4_000_000, max_request_pixels=5_000_000)
    decoded = []
    monkeypatch.setattr(
        media, "load_image", lambda data, *a: decoded.append(len(data)) or "image"
    )
    big = data_url(bomb_png(2000, 2000), "image/png")
    budget = media.PixelBudget(s.max_request_pixels)
    assert (
        asyncio.run(media.fetch_image(big, s, budget)) == "image"
        and budget.used == 4_000_000
    )
    with pytest.raises(
        ImageTooLargeError,
        match=r"8000000 pixels .* limit per request is 5000000 "
        r"\(--max-request-pixels\)",
    ):
        asyncio.run(media.fetch_image(big, s, budget))
    assert len(decoded) == 1  # the refused one was never decoded
    assert media.header_pixels(b"not an image") == 0
    assert (
        settings_from_args(
            build_parser().parse_args(["serve", "--max-request-pixels", "7"])
        ).max_request_pixels
        == 7
    )
    with pytest.raises(Exception, match="max_request_pixels"):
        settings(max_request_pixels=0)


def test_the_chat_service_charges_every_image_before_decoding_any_and_returns_memory(
    monkeypatch,
):
    import asyncio
    from types import SimpleNamespace

    from asymspec_vl.core.errors import ImageTooLargeError
    from asymspec_vl.serve import chat

    decoded, trims = [], []

    async def fetch(url, s):
        return bomb_png(2000, 1500)  # 3 MP each

    async def decode(data, s, fit):
        decoded.append(data)
        return "image"

    async def view(im, c, o):
        return SimpleNamespace(caption=c, ocr=o)

    monkeypatch.setattr(chat, "fetch_image_bytes", fetch)
    monkeypatch.setattr(chat, "decode_image", decode)
    monkeypatch.setattr(chat, "release_memory", lambda: trims.append(1))
    monkeypatch.setattr(
        chat, "conversation_request", lambda job, images, views: "request"
    )
    monkeypatch.setattr(
        chat, "answer_warnings", lambda toy, images: ()
    )  # the images here are stand-ins
    runner = SimpleNamespace(
        vl=SimpleNamespace(pair=SimpleNamespace(processor=None))
    )  # no size rule: no fit
    service = chat.ChatService(
        settings(max_request_pixels=6_000_000), runner, SimpleNamespace(view=view), None
    )
    monkeypatch.setattr(service, "_encode", lambda request, plan: "enc")
    job = SimpleNamespace(image_urls=["a", "b"], captions=["", ""], ocrs=["", ""])
    assert asyncio.run(service._views(job, None))[0] == "enc"
    assert len(decoded) == 2 and trims == [1]  # 6 MP decoded: memory returned
    job3 = SimpleNamespace(image_urls=["a", "b", "c"], captions=[""] * 3, ocrs=[""] * 3)
    with pytest.raises(ImageTooLargeError, match="9000000 pixels"):
        asyncio.run(service._views(job3, None))
    assert (
        len(decoded) == 2
    )  # the third image's header refused the request before any of its images decoded
    assert (
        asyncio.run(service._views(job, None))[0] == "enc"
    )  # a fresh budget for each request
