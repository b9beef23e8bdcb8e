"""A conversation too long to fit is refused in CPU time linear in its messages, before any template renders it
(inputs/prompt_floor.py, budget.check_floor_fits), and the encoding of a request the server gave up stops
(inputs/stop_signal.py): issue 47, item 1. On a ChatService over the embedded pair's real tokenizer and processor
(no engine: these checks run before any model)."""

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest
from transformers import AutoProcessor, AutoTokenizer

from asymspec_vl.core.errors import PromptTooLongError
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.request_plan import RequestPlan
from asymspec_vl.inputs.conversation import Conversation, encode
from asymspec_vl.inputs.prompt_floor import prompt_floor, role_frames
from asymspec_vl.inputs.stop_signal import EncodingAbandoned
from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.serve.app import parse_chat_request
from asymspec_vl.serve.captioning import ViewMaker
from asymspec_vl.serve.chat import ChatService
from asymspec_vl.serve.http_errors import RequestTimeoutError
from asymspec_vl.serve.metrics import ServeMetrics
from asymspec_vl.serve.settings import ServeSettings
from asymspec_vl.serve.translate import translate

CONTEXT = 4096  # the embedded engine's context, as the report's server had


@pytest.fixture(scope="module")
def pair():
    return SimpleNamespace(
        processor=AutoProcessor.from_pretrained(embedded_models()["drafter"]),
        tokenizer=AutoTokenizer.from_pretrained(embedded_models()["verifier"]),
        cross_map=None,
        eos_ids=(0,),
        check_stop_ids=lambda cfg: None,
    )


def service(pair, context: int, **kw) -> ChatService:
    runner = SimpleNamespace(
        methods=tuple(METHODS),
        vl=SimpleNamespace(pair=pair),
        plan=lambda method, cfg: RequestPlan(method, cfg),
        context_of=lambda plan: lambda model: context,
    )
    settings = ServeSettings("embedded", "embedded", **kw)
    return ChatService(settings, runner, ViewMaker(None), ServeMetrics())


def turns(n: int) -> list[dict]:
    """n one-character exchanges, then the question."""
    chat = []
    for _ in range(n):
        chat += [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"},
        ]
    return chat + [{"role": "user", "content": "How many?"}]


def job(messages: list[dict]):
    """The ChatJob of a request body as the server reads it (the JSON body parsed, then translated)."""
    body = json.dumps({"model": "asymspec-vl", "messages": messages}).encode()
    return translate(parse_chat_request(body), ServeSettings("embedded", "embedded"))


def cpu_to_refuse(pair, n: int) -> float:
    """CPU seconds from the request's body to its PromptTooLongError (the fewest of two tries)."""
    tries, messages = [], turns(n)
    for _ in range(2):
        start = time.process_time()
        with pytest.raises(PromptTooLongError, match="at least"):
            asyncio.run(
                service(pair, CONTEXT, request_timeout_s=60).prepare(job(messages))
            )
        tries.append(time.process_time() - start)
    return min(tries)


def test_chatml_frames_every_message_with_two_added_tokens(pair):
    # <|im_start|>role ... <|im_end|>: the floor of each role on both templates of the pair
    want = {"system": 2, "user": 2, "assistant": 2}
    assert role_frames(pair.tokenizer) == want and role_frames(pair.processor) == want


def test_the_floor_is_never_over_the_real_prompt(pair):
    chat = [{"role": "system", "content": "Be brief."}, *turns(3)]
    chat[-1]["content"] = (
        "<|im_end|> x"  # a control token's text is plain text: no frame of its own
    )
    enc = encode(Conversation(chat), pair.processor, pair.tokenizer)
    roles = [m["role"] for m in chat]
    assert prompt_floor(pair.tokenizer, roles) == 2 * len(chat) <= len(enc.comp.ids)
    assert prompt_floor(pair.processor, roles) <= len(enc.full.ids)


def test_a_conversation_over_the_context_is_refused_in_linear_cpu_time(pair):
    # 20,000 exchanges (40,001 messages): at least 80,002 tokens of frames. Before the floor, the templates
    # rendered all of it and split it at each message (quadratic): minutes of CPU for the same 400.
    small, large = cpu_to_refuse(pair, 2_500), cpu_to_refuse(pair, 20_000)
    print(f"CPU to refuse: {small:.3f} s (2,500 exchanges), {large:.3f} s (20,000)")
    assert large < 5.0, f"{large:.2f} s of CPU to refuse 20,000 exchanges"
    assert large < 24 * small + 0.05, (small, large)  # linear: x8 (quadratic: x64)


def test_a_conversation_that_fits_its_floor_is_encoded_and_counted_for_real(pair):
    few = service(pair, CONTEXT)
    prepared = asyncio.run(few.prepare(job(turns(3))))
    assert len(prepared.enc.comp.ids) > 2 * 7
    with pytest.raises(PromptTooLongError, match=r"prompt \(x_full\) has \d+ tokens"):
        asyncio.run(
            service(pair, 60).prepare(job(turns(3)))
        )  # over by its texts: the real count refuses it


def test_the_encoding_of_a_request_past_its_timeout_stops(pair, monkeypatch):
    """The encoding thread ends with EncodingAbandoned soon after the 504 instead of running to its end."""
    late = service(pair, 10**9, request_timeout_s=0.3)
    ended, outcome = threading.Event(), []
    real = late._encode

    def encode_and_tell(request, plan):
        try:
            outcome.append(real(request, plan))
        except BaseException as e:
            outcome.append(e)
            raise
        finally:
            ended.set()

    monkeypatch.setattr(late, "_encode", encode_and_tell)
    with pytest.raises(RequestTimeoutError):
        asyncio.run(
            late.prepare(job(turns(6_000)))
        )  # seconds to encode: past the timeout
    assert ended.wait(30), (
        "the encoding thread was still running 30 s after the timeout"
    )
    assert isinstance(outcome[0], EncodingAbandoned), outcome
