"""The page's Chat tab: a conversation about one image (its caption and OCR text for the verifier), with the
history, Send, Retry, Stop and Clear, as Hugging Face Spaces' VLM demos have; each reply by one method."""

from __future__ import annotations

import gradio as gr

from .chat_session import METHODS
from .handlers import Handlers


def build_chat_tab(handlers: Handlers, controls: list, describes: bool) -> None:
    """The tab's components and events, inside the caller's gr.Tab. controls: the decoding controls (K, β, γ,
    gate, max new tokens, temperature, top-p, seed), shared with the single question. describes: a captioner
    prefills the view on upload."""
    with gr.Row():
        with gr.Column(scale=1):
            image = gr.Image(
                label="Image",
                type="filepath",
                sources=["upload", "clipboard"],
                elem_id="chat-image",
                height=180,
            )
            caption = gr.Textbox(
                label="Caption",
                lines=2,
                elem_id="chat-caption",
                placeholder="A description of the image for the verifier",
            )
            ocr = gr.Textbox(
                label="OCR text",
                lines=1,
                elem_id="chat-ocr",
                placeholder="Text written in the image",
            )
            method = gr.Radio(
                [(title, name) for name, title in METHODS.items()],
                value="asymspec",
                label="replies by",
                elem_id="chat-method",
            )
        with gr.Column(scale=2):
            message = gr.HTML("", elem_id="chat-message-box")
            chatbot = gr.Chatbot(
                label="Chat",
                elem_id="chatbot",
                height=380,
                buttons=["copy", "copy_all"],
                placeholder="Ask about the image; the conversation's history is read at every "
                "turn.",
            )
            status = gr.Markdown("", elem_id="chat-status")
            with gr.Row(equal_height=True):
                question = gr.Textbox(
                    show_label=False,
                    lines=1,
                    max_lines=6,
                    scale=5,
                    elem_id="chat-question",
                    placeholder="Type a message",
                )
                send = gr.Button(
                    "Send",
                    variant="primary",
                    scale=1,
                    min_width=80,
                    elem_id="chat-send",
                )
            with gr.Row():
                retry = gr.Button("Retry", size="sm", elem_id="chat-retry")
                stop = gr.Button("Stop", size="sm", elem_id="chat-stop")
                clear = gr.Button("Clear", size="sm", elem_id="chat-clear")
    turns = gr.State([])  # the conversation: [{"role", "content"}, ...]
    shown = [message, chatbot, turns, status, send, retry]
    page = dict(api_visibility="private")
    answer = dict(
        fn=handlers.chat_answer,
        inputs=[turns, image, caption, ocr, method, *controls],
        outputs=shown,
        concurrency_id="models",
        preprocess=False,
        show_progress="hidden",
        **page,
    )
    for i, trigger in enumerate((send.click, question.submit)):
        trigger(
            handlers.chat_send,
            [question, turns],
            [*shown, question],
            queue=False,
            show_progress="hidden",
            api_name=f"page_chat_send_{i}",
            **page,
        ).then(api_name=f"page_chat_answer_{i}", **answer)
    retry.click(
        handlers.chat_retry,
        turns,
        shown,
        queue=False,
        show_progress="hidden",
        api_name="page_chat_retry",
        **page,
    ).then(api_name="page_chat_retry_answer", **answer)
    stop.click(
        handlers.stop, None, None, queue=False, api_name="page_chat_stop", **page
    )
    for name, trigger in (
        ("page_chat_clear", clear.click),
        ("page_chat_cleared", chatbot.clear),
    ):  # its bin icon too
        trigger(handlers.chat_clear, None, shown, queue=False, api_name=name, **page)
    image.change(
        handlers.chat_describe,
        image,
        [caption, ocr, *shown],
        preprocess=False,
        show_progress_on=[caption, ocr] if describes else None,
        api_name="page_chat_image",
        **page,
    )
