"""The Gradio page: image + question in, the verifier's view, coloured AsymSpec answer, baselines and stats out."""

from __future__ import annotations

import functools
import html
import inspect
import json
import logging
from pathlib import Path

import gradio as gr
from PIL import Image

from asymspec_vl.config import GATES
from asymspec_vl.errors import AsymSpecError

from . import render
from .service import BASELINES, DemoService

log = logging.getLogger(__name__)
EXAMPLES_DIR = Path(__file__).parent / "examples"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
CSS = (".answer{min-height:3em} .answer-status{color:#666;font-size:0.85em} "
       "table.stats td,table.stats th{padding:2px 6px}")
# System fonts only: the page must not fetch anything from the internet.
THEME = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "monospace"])


def checked_image_input(**kwargs) -> gr.Image:
    """A gr.Image (type filepath) whose server-side check turns a wrong file type or an unreadable upload
    into a message. The check wraps this instance's preprocess (a gr.Image subclass would make Gradio write
    a .pyi stub next to this module)."""
    component = gr.Image(type="filepath", image_mode=None, format="png", **kwargs)
    preprocess = component.preprocess

    def checked(payload):
        if payload is None:
            return None
        is_data_url = bool(payload.url and payload.url.startswith("data:"))
        suffix = Path(payload.orig_name or payload.path or "").suffix.lower()
        if not is_data_url and suffix not in IMAGE_SUFFIXES:
            raise gr.Error(_escape(f"unsupported file type '{suffix or '(none)'}': upload an image "
                                   f"({', '.join(IMAGE_SUFFIXES)})"), title="InvalidImageError",
                           print_exception=False)
        try:
            return preprocess(payload)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            raise gr.Error(_escape(f"the upload is not a readable image ({type(e).__name__})"),
                           title="InvalidImageError", print_exception=False) from e

    component.preprocess = checked
    return component


def _escape(text: str) -> str:
    """gr.Error renders its message as HTML: escape it (quotes are harmless in text and kept readable)."""
    return html.escape(text, quote=False)


def _message(e: Exception) -> gr.Error:
    """The toolkit's typed errors become messages in the page; anything else a short note (logged)."""
    if isinstance(e, gr.Error):
        return e
    if isinstance(e, AsymSpecError):
        return gr.Error(_escape(str(e)), title=type(e).__name__, print_exception=False)
    log.exception("demo: unexpected error")
    return gr.Error(_escape(f"the request failed ({type(e).__name__}); see the server log"),
                    title="Internal error")


def _messages(fn):
    """Wrap an event handler so that its errors are shown as messages, never as a stack trace."""
    @functools.wraps(fn)
    def plain(*args):
        try:
            return fn(*args)
        except Exception as e:
            raise _message(e) from e

    @functools.wraps(fn)
    def streaming(*args):
        try:
            yield from fn(*args)
        except Exception as e:
            raise _message(e) from e

    return streaming if inspect.isgeneratorfunction(fn) else plain


def load_examples() -> list[list[str]]:
    """Rows [image path, question, caption, OCR] from demo/examples/examples.json (all offline)."""
    entries = json.loads((EXAMPLES_DIR / "examples.json").read_text())
    return [[str(EXAMPLES_DIR / e["image"]), e["question"], e.get("caption", ""), e.get("ocr", "")]
            for e in entries]


def build_demo(service: DemoService) -> gr.Blocks:
    """The page and its API: /describe (image -> caption, OCR) and /answer (streams the answers)."""
    cfg, names = service.base_config, service.vl.names
    # uploads older than an hour are deleted every hour (Gradio's cache would otherwise grow without bound)
    with gr.Blocks(title="AsymSpec-VL demo", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# AsymSpec-VL\nThe **VL drafter** reads the image; the text-only **verifier** reads only "
                    "the caption and OCR text below. Every token of the answer is coloured by where it came from.\n\n"
                    f"drafter `{names.get('drafter')}` · verifier `{names.get('verifier')}` · "
                    f"backend `{names.get('backend')}`")
        with gr.Row():
            with gr.Column(scale=1):
                image = checked_image_input(label="Image", sources=["upload", "clipboard"], elem_id="image")
                question = gr.Textbox(label="Question", lines=2, elem_id="question",
                                      placeholder="What is the value of the tallest bar?")
                with gr.Accordion("The verifier's view (editable)", open=True):
                    source = getattr(service.captioner, "name", None)
                    gr.Markdown(f"Prefilled on upload by `{source}`; edit freely." if source else
                                "No captioner is running: type what the verifier should read.")
                    caption = gr.Textbox(label="Caption", lines=3, elem_id="caption",
                                         placeholder="A description of the image for the verifier")
                    ocr = gr.Textbox(label="OCR text", lines=2, elem_id="ocr",
                                     placeholder="Text written in the image")
                with gr.Accordion("Decoding controls", open=False):
                    k = gr.Slider(1, 16, value=cfg.K, step=1, label="K (draft tokens per step)", elem_id="k")
                    beta = gr.Slider(0, 10, value=cfg.beta, step=0.1, label="β (δ-fusion weight)", elem_id="beta")
                    gamma = gr.Slider(min(0.01, cfg.gamma), 1, value=cfg.gamma, step=0.01,
                                      label="γ (acceptance threshold)", elem_id="gamma")
                    gate = gr.Radio(list(GATES), value=cfg.gate, label="gate", elem_id="gate")
                    max_tokens = gr.Slider(1, max(1024, cfg.max_new_tokens), value=cfg.max_new_tokens, step=1,
                                           label="max new tokens", elem_id="max-tokens")
                    baselines = gr.CheckboxGroup([("Floor", "floor"), ("VL drafter alone", "drafter")],
                                                 value=list(BASELINES), label="also run", elem_id="baselines")
                with gr.Row():
                    run = gr.Button("Answer", variant="primary", elem_id="answer-button")
                    stop = gr.Button("Stop", elem_id="stop-button")
                gr.Examples(load_examples(), inputs=[image, question, caption, ocr], label="Examples (offline)")
            with gr.Column(scale=1):
                asym = gr.HTML(render.placeholder_html("asymspec", "no answer yet"), label="asymspec_answer",
                               elem_id="asymspec-answer")
                gr.HTML(render.legend_html(), elem_id="legend")
                stats = gr.HTML(render.stats_html([]), label="stats", elem_id="stats")
                with gr.Row():
                    floor = gr.HTML(render.placeholder_html("floor", "no answer yet"), label="floor_answer",
                                    elem_id="floor-answer")
                    drafter = gr.HTML(render.placeholder_html("drafter", "no answer yet"), label="drafter_answer",
                                      elem_id="drafter-answer")
                with gr.Accordion("Full results (prompts each model read, trace, stats)", open=False):
                    results = gr.JSON(label="results", elem_id="results")

        image.upload(_messages(service.describe_image), image, [caption, ocr], api_name="describe")
        event = run.click(_messages(service.answer), [image, question, caption, ocr, k, beta, gamma, gate, max_tokens,
                                                  baselines], [asym, floor, drafter, stats, results],
                          api_name="answer", concurrency_limit=1)
        stop.click(None, None, None, cancels=[event], api_name=False)
    return demo


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, max_file_bytes: int | None = None,
           block: bool = True, quiet: bool = False) -> gr.Blocks:
    """Serve the page (no share link, no server-side rendering); upload size limited to max_file_bytes."""
    demo.queue(default_concurrency_limit=1)
    demo.launch(server_name=host, server_port=port, max_file_size=max_file_bytes, share=False, ssr_mode=False,
                prevent_thread_lock=not block, quiet=quiet, show_error=False, allowed_paths=[str(EXAMPLES_DIR)],
                theme=THEME, css=CSS, footer_links=["api"])
    return demo
