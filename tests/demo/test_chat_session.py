"""The page's Chat tab (issue 35 item 8) through its handlers, on the embedded pair: each reply is the library's
generate_chat over the whole history (the image with its caption in the first user message), streamed without
ever showing text a stop string cuts; Retry answers the last message again, Clear empties the chat, an empty
message or a setting out of range is the chat's one message and runs nothing; the page's tabs and controls."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from asymspec_vl.demo import chat_session as chat
from asymspec_vl.demo.handlers import Handlers
from asymspec_vl.demo.service import DemoService

from asymspec_vl import AsymSpecConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EXAMPLES = Path(__file__).resolve().parents[2] / "demo" / "examples"
MULT = json.loads((EXAMPLES / "examples.json").read_text())[
    0
]  # 9 × 14 on the yellow triangle
IMAGE = str(EXAMPLES / MULT["image"])
CONTROLS = (
    2,
    1.0,
    0.5,
    "cda",
    20,
    0.0,
    1.0,
    "",
)  # K, β, γ, gate, max new tokens, temperature, top-p, seed
REQUEST = SimpleNamespace(session_hash="chat")


@pytest.fixture(scope="module")
def vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def _turn(handlers, turns, question, method="asymspec", controls=CONTROLS, send=True):
    """Send (or Retry) then the answer, as the page chains them: (every output of the answer, the last turns)."""
    if send:
        shown = handlers.chat_send(question, turns, REQUEST)
    else:
        shown = handlers.chat_retry(turns, REQUEST)
    turns = shown[2] if isinstance(shown[2], list) else turns
    out = list(
        handlers.chat_answer(
            turns, IMAGE, MULT["caption"], "", method, *controls, REQUEST
        )
    )
    last = next((o[2] for o in reversed(out) if isinstance(o[2], list)), turns)
    return shown, out, last


def test_each_reply_is_generate_chat_over_the_whole_history(vl):
    handlers = Handlers(DemoService(vl, AsymSpecConfig()))
    cfg = AsymSpecConfig(K=2, max_new_tokens=20)
    turns = []
    for question, method in (
        (MULT["question"], "asymspec"),
        ("And the purple circle's number?", "floor"),
    ):
        shown, out, turns = _turn(handlers, turns, question, method)
        assert (
            shown[0] == ""
            and shown[1][-1] == {"role": "user", "content": question}
            and shown[6] == ""
        )
        assert [b["interactive"] for b in shown[4:6]] == [
            False,
            False,
        ]  # Send and Retry wait for the reply
        assert [b["interactive"] for b in out[-1][4:6]] == [True, True]
        messages = chat.chat_messages(turns[:-1], IMAGE, MULT["caption"], "")
        want = vl.generate_chat(messages, method=method, config=cfg)
        assert turns[-1] == {"role": "assistant", "content": want.text} and want.text
        assert (
            out[-1][3].startswith("done: ")
            and f"{len(want.token_ids)} tokens" in out[-1][3]
        )
    assert [t["role"] for t in turns] == ["user", "assistant"] * 2
    first = messages[0]["content"]
    assert (
        first[0]["type"] == "image"
        and first[0]["caption"] == MULT["caption"]
        and first[1]["text"] == MULT["question"]
    )
    assert [m["content"] for m in messages[1:]] == [t["content"] for t in turns[1:-1]]


def test_retry_answers_the_last_message_again_and_clear_empties_the_chat(vl):
    handlers = Handlers(DemoService(vl, AsymSpecConfig()))
    _, _, turns = _turn(handlers, [], MULT["question"])
    shown, _, again = _turn(handlers, turns, None, send=False)
    assert (
        shown[2] == turns[:-1] and again == turns
    )  # greedy: the same reply again, not a second one
    assert handlers.chat_clear(REQUEST)[:4] == ("", [], [], "")
    message = handlers.chat_retry([], REQUEST)[0]
    assert "There is nothing to retry" in message


def test_an_empty_message_or_a_setting_out_of_range_is_the_chats_message_and_runs_nothing(
    vl,
):
    runs = []
    counting = SimpleNamespace(
        names=vl.names,
        pair=vl.pair,
        decode=vl.decode,
        generate_chat=lambda **kw: runs.append(kw),
    )
    handlers = Handlers(DemoService(counting, AsymSpecConfig()))
    shown = handlers.chat_send("  ", [], REQUEST)
    assert "There is no question" in shown[0] and "The message is empty" in shown[0]
    assert list(
        handlers.chat_answer([], IMAGE, "", "", "asymspec", *CONTROLS, REQUEST)
    ) == [(shown[1],) * 6]
    turns = [{"role": "user", "content": "Q?"}]
    out = list(
        handlers.chat_answer(
            turns, IMAGE, "", "", "asymspec", 20, *CONTROLS[1:], REQUEST
        )
    )
    assert (
        len(out) == 1
        and "A setting is out of range" in out[0][0]
        and "K=20 is out of range" in out[0][0]
    )
    assert out[0][2] == turns and not runs  # the question stays: Retry can answer it
    assert [b["interactive"] for b in out[0][4:6]] == [True, True]


@pytest.mark.parametrize(
    "stops",
    [
        dict(stop=("26",)),
        dict(stop=("The answer is",)),
        dict(stop=("= 1",), include_stop_str_in_output=True),
    ],
    ids=repr,
)
def test_a_streamed_reply_never_shows_what_a_stop_string_cuts(vl, stops):
    handlers = Handlers(DemoService(vl, AsymSpecConfig(**stops)))
    _, out, turns = _turn(handlers, [], MULT["question"])
    final = turns[-1]["content"]
    messages = chat.chat_messages(turns[:-1], IMAGE, MULT["caption"], "")
    assert (
        final
        == vl.generate_chat(
            messages, config=AsymSpecConfig(K=2, max_new_tokens=20, **stops)
        ).text
    )
    shown = [
        o[1][-1]["content"]
        for o in out
        if isinstance(o[1], list) and o[1][-1]["role"] == "assistant"
    ]
    assert shown and all(final.startswith(s) for s in shown), (shown, final)


def test_the_page_has_a_chat_tab_beside_the_single_question_sharing_the_decoding_controls(
    vl,
):
    from asymspec_vl.demo.page import build_demo

    demo = build_demo(DemoService(vl, AsymSpecConfig()))
    ids = {c["props"].get("elem_id"): c["id"] for c in demo.config["components"]}
    assert {
        "ask-tab",
        "chat-tab",
        "chatbot",
        "chat-send",
        "chat-retry",
        "chat-clear",
        "chat-stop",
    } <= set(ids)
    deps = {d["api_name"]: d for d in demo.config["dependencies"]}
    shared = [
        ids[e]
        for e in (
            "k",
            "beta",
            "gamma",
            "gate",
            "max-tokens",
            "temperature",
            "top-p",
            "seed",
        )
    ]
    assert deps["page_chat_answer_0"]["inputs"][-8:] == shared
    assert [ids[e] for e in ("k", "seed")] == [
        deps["page_answer"]["inputs"][4],
        deps["page_answer"]["inputs"][-1],
    ]
