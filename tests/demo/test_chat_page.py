"""demo/chat_page.py built on Gradio without a browser: the Chat tab's components (labels, the method choices) and
its events (which handler each runs, on which components, chained how), read from the Blocks' config."""

import gradio as gr
import pytest
from asymspec_vl.demo.chat_page import build_chat_tab
from asymspec_vl.demo.chat_session import METHODS
from asymspec_vl.demo.handlers import Handlers

CONTROLS = [
    f"control-{i}" for i in range(8)
]  # K, β, γ, gate, max new tokens, temperature, top-p, seed
SHOWN = [
    "chat-message-box",
    "chatbot",
    "turns",
    "chat-status",
    "chat-send",
    "chat-retry",
]


def build(describes: bool):
    """The tab in a Blocks of its own; -> (config, fns, id -> elem_id (the State: "turns"), State values)."""
    with gr.Blocks() as blocks:
        controls = [gr.Number(elem_id=e) for e in CONTROLS]
        build_chat_tab(Handlers(None), controls, describes=describes)
    config = blocks.config
    names = {
        c["id"]: c["props"].get("elem_id")
        or ("turns" if c["type"] == "state" else None)
        for c in config["components"]
    }
    states = [b.value for b in blocks.blocks.values() if isinstance(b, gr.State)]
    return config, blocks.fns, names, states


@pytest.fixture(scope="module")
def tab():
    return build(describes=True)


def component(config, elem_id):
    return next(c for c in config["components"] if c["props"].get("elem_id") == elem_id)


def test_the_components_carry_their_labels_and_the_methods(tab):
    config = tab[0]
    labels = {
        e: component(config, e)["props"].get("label")
        for e in ("chat-image", "chat-caption", "chat-ocr", "chat-method", "chatbot")
    }
    assert labels == {
        "chat-image": "Image",
        "chat-caption": "Caption",
        "chat-ocr": "OCR text",
        "chat-method": "replies by",
        "chatbot": "Chat",
    }
    method = component(config, "chat-method")["props"]
    assert method["choices"] == [(title, name) for name, title in METHODS.items()]
    assert method["value"] == "asymspec"
    assert [
        component(config, f"chat-{b}")["props"]["value"]
        for b in ("send", "retry", "stop", "clear")
    ] == [
        "Send",
        "Retry",
        "Stop",
        "Clear",
    ]
    assert tab[3] == [[]]  # one State: the conversation, empty at first


def events(config, fns, names, _states=None):
    out = {}
    for d in config["dependencies"]:
        out[d["api_name"]] = dict(
            fn=fns[d["id"]].fn.__name__,
            inputs=[names[i] for i in d["inputs"]],
            outputs=[names[i] for i in d["outputs"]],
            after=d["trigger_after"],
            queue=d["queue"],
            id=d["id"],
            private=d["api_visibility"] == "private",
            progress_on=d["show_progress_on"],
            preprocess=fns[d["id"]].preprocess,
        )
    return out


def test_send_retry_stop_clear_and_upload_run_their_handlers_on_the_right_components(
    tab,
):
    ev = events(*tab)
    answer_inputs = [
        "turns",
        "chat-image",
        "chat-caption",
        "chat-ocr",
        "chat-method",
        *CONTROLS,
    ]
    for i in (0, 1):  # the Send button and Enter in the question box
        send, answer = ev[f"page_chat_send_{i}"], ev[f"page_chat_answer_{i}"]
        assert (send["fn"], send["inputs"], send["outputs"]) == (
            "chat_send",
            ["chat-question", "turns"],
            [*SHOWN, "chat-question"],
        )
        assert not send["queue"]  # the user's turn shows at once
        assert (answer["fn"], answer["inputs"], answer["outputs"]) == (
            "chat_answer",
            answer_inputs,
            SHOWN,
        )
        assert (
            answer["after"] == send["id"]
            and answer["queue"]
            and answer["preprocess"] is False
        )
    retry, again = ev["page_chat_retry"], ev["page_chat_retry_answer"]
    assert (retry["fn"], retry["inputs"], retry["outputs"]) == (
        "chat_retry",
        ["turns"],
        SHOWN,
    )
    assert (again["fn"], again["inputs"], again["after"]) == (
        "chat_answer",
        answer_inputs,
        retry["id"],
    )
    assert (ev["page_chat_stop"]["fn"], ev["page_chat_stop"]["inputs"]) == ("stop", [])
    for name in (
        "page_chat_clear",
        "page_chat_cleared",
    ):  # the Clear button and the chatbot's bin icon
        assert (ev[name]["fn"], ev[name]["outputs"]) == ("chat_clear", SHOWN)
    upload = ev["page_chat_image"]
    assert (upload["fn"], upload["inputs"], upload["outputs"]) == (
        "chat_describe",
        ["chat-image"],
        ["chat-caption", "chat-ocr", *SHOWN],
    )
    assert all(e["private"] for e in ev.values())  # page events: not part of the API
    assert len(ev) == 10


def test_the_upload_shows_progress_on_the_view_only_when_a_captioner_describes(tab):
    names = tab[2]
    assert [names[i] for i in events(*tab)["page_chat_image"]["progress_on"]] == [
        "chat-caption",
        "chat-ocr",
    ]
    assert events(*build(describes=False))["page_chat_image"]["progress_on"] is None
