"""The Gradio page: image + question in, the verifier's view, coloured AsymSpec answer, baselines and stats out."""

from __future__ import annotations

import json
import warnings

import gradio as gr

from asymspec_vl.commands import is_embedded
from asymspec_vl.config import GATES

from . import render
from .board import BASELINES
from .handlers import NO_ANSWER, Handlers
from .service import SESSIONS_KEPT, DemoService
from .uploads import EXAMPLES_DIR
CSS = """
.answer{min-height:3em} .answer-status{color:#555;font-size:0.85em;margin-top:2px}
.answer-tokens{white-space:pre-wrap;line-height:2.1;font-family:ui-monospace,monospace;font-size:1.05em}
.tok{border-radius:3px;padding:1px 1px;margin-right:2px;box-shadow:inset 0 0 0 1px rgba(0,0,0,0.22)}
table.stats{width:100%;font-size:0.9em} table.stats td,table.stats th{padding:2px 5px}
.message{border:1px solid #c0392b;border-left-width:6px;border-radius:4px;padding:8px 12px;background:#fdf0ee}
#message:not(:has(.message)){display:none}
#image .upload-container,#image .image-frame{width:100% !important}
#image .image-frame img{width:100%;height:auto;max-height:420px;object-fit:contain}
#examples .container{width:144px;height:auto;max-height:108px}
#examples .container img{width:100%;height:auto;max-height:108px;object-fit:contain}
"""
# Small images (the toy scenes are 96 x 32) are scaled up with sharp pixels instead of a blur.
HEAD = """<script>
document.addEventListener("load", (event) => {
  const img = event.target;
  if (img.tagName === "IMG" && img.naturalWidth > 0 && img.naturalWidth <= 320) {
    img.style.imageRendering = "pixelated";
  }
}, true);
</script>"""
# System fonts only: the page must not fetch anything from the internet.
THEME = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "monospace"])


def load_examples(toy_only: bool) -> list[list[str]]:
    """Rows [image path, question, caption, OCR] from demo/examples/examples.json; toy_only: the toy scenes alone
    (what the embedded pair can answer), otherwise every example."""
    entries = json.loads((EXAMPLES_DIR / "examples.json").read_text())
    return [[str(EXAMPLES_DIR / e["image"]), e["question"], e.get("caption", ""), e.get("ocr", "")]
            for e in entries if e["world"] == "toy" or not toy_only]


def _header(names: dict, toy: bool) -> str:
    models = ("the embedded toy pair: a tiny Qwen3-VL drafter and a tiny Qwen3 verifier trained on scenes of "
              "coloured shapes carrying digits" if toy else
              f"drafter `{names.get('drafter')}` · verifier `{names.get('verifier')}`")
    return ("# AsymSpec-VL\nThe **VL drafter** reads the image; the text-only **verifier** reads only the caption and "
            "OCR text below. Every token of the answer is coloured by where it came from.\n\n"
            f"Models: {models} · backend `{names.get('backend')}`")


def build_demo(service: DemoService) -> gr.Blocks:
    """The page, and its API: /describe (image -> caption, OCR) and /answer (streams the answers)."""
    cfg, names = service.base_config, service.vl.names
    toy = is_embedded(names.get("drafter")) and is_embedded(names.get("verifier"), "verifier")
    handlers = Handlers(service)
    # uploads older than an hour are deleted every hour (Gradio's cache would otherwise grow without bound)
    with gr.Blocks(title="AsymSpec-VL demo", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown(_header(names, toy))
        with gr.Row():
            with gr.Column(scale=1):
                image = gr.Image(label="Image", type="filepath", sources=["upload", "clipboard"], elem_id="image")
                message = gr.HTML("", elem_id="message")
                question = gr.Textbox(label="Question", lines=2, elem_id="question",
                                      placeholder="Which number does the yellow circle carry?" if toy else
                                      "What is the value of the tallest bar?")
                with gr.Accordion("The verifier's view (editable)", open=True):
                    gr.Markdown(service.captioner_label or "No captioner runs here: type what the verifier "
                                                           "should read.", elem_id="view-source")
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
                gr.Examples(load_examples(toy_only=toy), inputs=[image, question, caption, ocr],
                            label="Examples (offline)", elem_id="examples")
                if toy:
                    gr.Markdown("These are toy scenes, the only images the embedded pair can read. Charts and "
                                "photos need real models: start the demo with `--drafter` and `--verifier`.",
                                elem_id="examples-note")
            with gr.Column(scale=1):
                asym = gr.HTML(NO_ANSWER[0], elem_id="asymspec-answer")
                gr.HTML(render.legend_html(), elem_id="legend")
                stats = gr.HTML(render.stats_html([]), elem_id="stats")
                with gr.Row():
                    floor = gr.HTML(NO_ANSWER[1], elem_id="floor-answer")
                    drafter = gr.HTML(NO_ANSWER[2], elem_id="drafter-answer")
                with gr.Accordion("Full results (prompts each model read, trace, stats)", open=False):
                    results = gr.JSON(label="results", elem_id="results")
                refused = gr.State(False)  # describe() refused the last upload and emptied the image box
                api_describe = gr.Button(visible=False)
                api_answer = gr.Button(visible=False)

        inputs = [image, question, caption, ocr, k, beta, gamma, gate, max_tokens, baselines]
        panels = [asym, floor, drafter, stats, results]
        # The events that read the image skip Gradio's preprocessing (it opens the file with Pillow: a traceback
        # for a file that is no image, Pillow's warning for a large one); uploads.load_upload checks it instead.
        # The page's own events are private (named page_*); /describe and /answer are the public API.
        raw, page = dict(preprocess=False), dict(api_visibility="private")
        image.upload(handlers.describe, image, [image, caption, ocr, message, *panels, refused],
                     show_progress_on=[caption, ocr], api_name="page_describe", **raw, **page)
        image.change(handlers.removed, [image, refused], [message, *panels, refused], queue=False,
                     show_progress="hidden", api_name="page_removed", **raw, **page)
        begun = run.click(handlers.begin, None, [message, *panels, run], queue=False, show_progress="hidden",
                          api_name="page_begin", **page)
        begun.then(handlers.answer, inputs, [message, *panels, run], concurrency_id="models", show_progress_on=[asym],
                   api_name="page_answer", **raw, **page)
        stop.click(handlers.stop, None, None, queue=False, api_name="page_stop", **page)
        api_describe.click(handlers.api_describe, image, [caption, ocr], api_name="describe", **raw)
        api_answer.click(handlers.api_answer, inputs, panels, api_name="answer", concurrency_id="models", **raw)
        demo.unload(handlers.closed)
    return demo


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, max_file_bytes: int | None = None,
           block: bool = True, quiet: bool = False) -> gr.Blocks:
    """Serve the page (no share link, no server-side rendering); upload size limited to max_file_bytes. One
    generation runs at a time (the models are shared); the others wait in the queue, each page showing its place.
    Gradio keeps the state of SESSIONS_KEPT sessions (its default, 10,000, let a flood of new sessions grow the
    memory by gigabytes); an older session's page then starts afresh."""
    # Warnings about Gradio's own code, logged per request, tell the operator nothing: Starlette's about a name
    # Gradio's routes use, pandas' deprecations inside Gradio's queue.
    warnings.filterwarnings("ignore", message=".*HTTP_422_UNPROCESSABLE_ENTITY.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"gradio\.")
    demo.queue(default_concurrency_limit=1)
    demo.launch(server_name=host, server_port=port, max_file_size=max_file_bytes, share=False, ssr_mode=False,
                prevent_thread_lock=not block, quiet=quiet, show_error=False, allowed_paths=[str(EXAMPLES_DIR)],
                theme=THEME, css=CSS, head=HEAD, footer_links=["api"], state_session_capacity=SESSIONS_KEPT)
    return demo
