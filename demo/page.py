"""The Gradio page: image + question in, the verifier's view, coloured AsymSpec answer, baselines and stats out."""

from __future__ import annotations

import json
import warnings

import gradio as gr

from asymspec_vl.core.config import GATES

from . import render
from .board import BASELINES
from .chat_page import build_chat_tab
from .controls import Slider
from .handlers import NO_ANSWER, Handlers
from .service import SESSIONS_KEPT, DemoService
from .uploads import EXAMPLES_DIR

CSS = """
.answer{min-height:3em} .answer-status{color:#555;font-size:0.85em;margin-top:2px}
.answer-text{font-size:1.2em;margin:2px 0 4px 0}
.answer-tokens{line-height:2.1;font-family:ui-monospace,monospace;font-size:1.05em}
.answer-tokens > .tok{white-space:pre}
.word{display:inline-block;white-space:nowrap}
.chip{display:inline-block;white-space:pre;line-height:1.5;border:1px solid rgba(0,0,0,0.22);border-radius:3px;
      margin-right:2px;overflow:hidden;vertical-align:middle}
.chip .tok{display:inline-block;padding:0 1px}
.legend .tok{border-radius:3px;padding:1px 2px;box-shadow:inset 0 0 0 1px rgba(0,0,0,0.22)}
.answer-notes{margin:4px 0;padding:6px 10px 6px 24px;background:#fff6d6;border-left:4px solid #d4a200;border-radius:3px}
.settings,.speed-note{color:#555;font-size:0.85em;margin-top:3px}
pre.prompt{white-space:pre-wrap;font-size:0.85em;background:#f6f6f6;padding:6px;border-radius:3px}
#examples th:nth-child(n+3),#examples td:nth-child(n+3){display:none} #examples thead{display:none}
table.stats{width:100%;font-size:0.9em} table.stats td,table.stats th{padding:2px 5px}
.message{border:1px solid #c0392b;border-left-width:6px;border-radius:4px;padding:8px 12px;background:#fdf0ee}
#message:not(:has(.message)){display:none}
#image .upload-container,#image .image-frame{width:100% !important}
#image .image-frame img{width:100%;height:auto;max-height:140px;object-fit:contain}
#question textarea::placeholder{font-style:italic;color:#8a8a8a;opacity:1}
.models{font-size:0.85em;color:#555}
#examples .container{width:144px;height:auto;max-height:60px}
#examples .container img{width:100%;height:auto;max-height:60px;object-fit:contain}
"""
IMAGE_HEIGHT = 170  # px: the header, the tabs, the question and the first example row fit a 1280 x 720 window
# An instruction, not a question: a sample question in grey read as one already filled in (issue 35)
QUESTION_PLACEHOLDER = "Type a question about the image"
# Gradio's slider puts a number typed into its box back into its range when the box loses focus, silently: the
# page keeps what was typed, and the answer refuses it by name (controls.check_in_range). Small images (the toy
# scenes are 96 x 32) are scaled up with sharp pixels instead of a blur.
HEAD = """<script>
document.addEventListener("blur", (event) => {
  const box = event.target;
  if (box.tagName === "INPUT" && box.type === "number" && box.closest(".decoding-controls")) {
    event.stopImmediatePropagation();
  }
}, true);
document.addEventListener("load", (event) => {
  const img = event.target;
  if (img.tagName === "IMG" && img.naturalWidth > 0 && img.naturalWidth <= 320) {
    img.style.imageRendering = "pixelated";
  }
}, true);
</script>"""
# System fonts only: the page must not fetch anything from the internet.
THEME = gr.themes.Default(
    font=["ui-sans-serif", "system-ui", "sans-serif"],
    font_mono=["ui-monospace", "monospace"],
)


def load_examples(toy_only: bool) -> list[list[str]]:
    """Rows [image path, question, caption, OCR] from demo/examples/examples.json; toy_only: the toy scenes alone
    (what the embedded pair can answer), otherwise every example."""
    entries = json.loads((EXAMPLES_DIR / "examples.json").read_text())
    return [
        [
            str(EXAMPLES_DIR / e["image"]),
            e["question"],
            e.get("caption", ""),
            e.get("ocr", ""),
        ]
        for e in entries
        if e["world"] == "toy" or not toy_only
    ]


def _header(names: dict, toy: bool) -> str:
    models = (
        "the embedded toy pair: a tiny Qwen3-VL drafter and a tiny Qwen3 verifier trained on scenes of "
        "coloured shapes carrying digits"
        if toy
        else f"drafter `{names.get('drafter')}` · verifier `{names.get('verifier')}`"
    )
    return (
        "## AsymSpec-VL\nThe **VL drafter** reads the image; the text-only **verifier** reads only the caption "
        "and OCR text. Every token of the answer is coloured by where it came from.<br>"
        f'<span class="models">Models: {models} · backend `{names.get("backend")}`</span>'
    )


def _slider(s: Slider, cfg, elem_id: str) -> gr.Slider:
    return gr.Slider(
        s.minimum,
        s.maximum,
        value=getattr(cfg, s.field),
        step=s.step,
        label=s.label,
        elem_id=elem_id,
        render=False,
    )


def build_demo(service: DemoService) -> gr.Blocks:
    """The page, and its API: /describe (image -> caption, OCR) and /answer (streams the answers). The first
    screen holds the first action: the image, the question with Answer beside it, the examples (a click runs
    one) and the answer."""
    cfg, names = service.base_config, service.vl.names
    toy = service.toy
    handlers = Handlers(service)
    # uploads older than an hour are deleted every hour (Gradio's cache would otherwise grow without bound)
    with gr.Blocks(
        title="AsymSpec-VL demo", analytics_enabled=False, delete_cache=(3600, 3600)
    ) as demo:
        gr.Markdown(_header(names, toy))
        # created here, shown further down: the examples fill them
        caption = gr.Textbox(
            label="Caption",
            lines=3,
            elem_id="caption",
            render=False,
            placeholder="A description of the image for the verifier",
        )
        ocr = gr.Textbox(
            label="OCR text",
            lines=2,
            elem_id="ocr",
            render=False,
            placeholder="Text written in the image",
        )
        # the decoding controls: shared by both tabs, shown under them
        offered = service.sliders
        k, beta, gamma = (
            _slider(offered[f], cfg, f.lower()) for f in ("K", "beta", "gamma")
        )
        gate = gr.Radio(
            list(GATES), value=cfg.gate, label="gate", elem_id="gate", render=False
        )
        max_tokens, temperature, top_p = (
            _slider(offered[f], cfg, e)
            for f, e in (
                ("max_new_tokens", "max-tokens"),
                ("temperature", "temperature"),
                ("top_p", "top-p"),
            )
        )
        # A text box: Gradio's number box shows an empty value as 0 (its frontend sets value ??= 0)
        seed = gr.Textbox(
            "" if cfg.seed is None else str(cfg.seed),
            max_lines=1,
            elem_id="seed",
            render=False,
            label="seed (empty: a random one, shown with the answer)",
        )
        controls = [k, beta, gamma, gate, max_tokens, temperature, top_p, seed]
        with gr.Tabs(elem_id="modes"):
            with gr.Tab("Ask one question", elem_id="ask-tab"):
                with gr.Row():
                    with gr.Column(scale=1):
                        image = gr.Image(
                            label="Image",
                            type="filepath",
                            sources=["upload", "clipboard"],
                            elem_id="image",
                            height=IMAGE_HEIGHT,
                        )
                        message = gr.HTML("", label="Message", elem_id="message")
                        with gr.Row(equal_height=True):
                            question = gr.Textbox(
                                label="Question",
                                lines=1,
                                max_lines=6,
                                elem_id="question",
                                scale=4,
                                placeholder=QUESTION_PLACEHOLDER,
                            )
                            with gr.Column(scale=1, min_width=110):
                                run = gr.Button(
                                    "Answer", variant="primary", elem_id="answer-button"
                                )
                                stop = gr.Button(
                                    "Stop", size="sm", elem_id="stop-button"
                                )
                        examples = gr.Examples(
                            load_examples(toy_only=toy),
                            inputs=[image, question, caption, ocr],
                            label="Examples (offline): click one to answer it",
                            elem_id="examples",
                            api_visibility="private",
                        )
                        if toy:
                            gr.Markdown(
                                "These are toy scenes, the only images the embedded pair can read. Charts and "
                                "photos need real models: start the demo with `--drafter` and `--verifier`.",
                                elem_id="examples-note",
                            )
                        with gr.Accordion("The verifier's view (editable)", open=True):
                            gr.Markdown(
                                service.captioner_label
                                or "No captioner runs here: type what the verifier "
                                "should read.",
                                elem_id="view-source",
                            )
                            caption.render()
                            ocr.render()
                    with gr.Column(scale=1):
                        asym = gr.HTML(
                            NO_ANSWER[0],
                            label="AsymSpec answer",
                            elem_id="asymspec-answer",
                        )
                        stats = gr.HTML(
                            render.stats_html([]), label="Stats", elem_id="stats"
                        )
                        gr.HTML(
                            render.legend_html(), label="Colour key", elem_id="legend"
                        )
                        with gr.Row():
                            floor = gr.HTML(
                                NO_ANSWER[1],
                                label="Floor answer",
                                elem_id="floor-answer",
                            )
                            drafter = gr.HTML(
                                NO_ANSWER[2],
                                label="VL drafter answer",
                                elem_id="drafter-answer",
                            )
                        with gr.Tabs():
                            with gr.Tab(
                                "Prompts each model read", elem_id="prompts-tab"
                            ):
                                prompts = gr.HTML(
                                    render.prompts_html(None),
                                    label="Prompts",
                                    elem_id="prompts",
                                )
                            with gr.Tab("Full results (JSON)", elem_id="results-tab"):
                                results = gr.JSON(label="Results", elem_id="results")
                        refused = gr.State(
                            False
                        )  # describe() refused the last upload and emptied the image box
                        api_describe = gr.Button(visible=False)
                        api_answer = gr.Button(visible=False)
            with gr.Tab("Chat", elem_id="chat-tab"):
                build_chat_tab(
                    handlers, controls, describes=service.captioner is not None
                )
        with gr.Accordion(
            "Decoding controls", open=False, elem_classes=["decoding-controls"]
        ):
            for control in controls[:-1]:
                control.render()
            with gr.Row():
                seed.render()
                baselines = gr.CheckboxGroup(
                    [("Floor", "floor"), ("VL drafter alone", "drafter")],
                    value=list(BASELINES),
                    label="also run (one question)",
                    elem_id="baselines",
                )

        inputs = [
            image,
            question,
            caption,
            ocr,
            k,
            beta,
            gamma,
            gate,
            max_tokens,
            baselines,
            temperature,
            top_p,
            seed,
        ]
        panels = [asym, floor, drafter, stats, prompts, results]
        # The events that read the image skip Gradio's preprocessing (it opens the file with Pillow: a traceback
        # for a file that is no image, Pillow's warning for a large one); uploads.load_upload checks it instead.
        # The page's own events are private (named page_*); /describe and /answer are the public API.
        raw, page = dict(preprocess=False), dict(api_visibility="private")
        image.upload(
            handlers.describe,
            image,
            [image, caption, ocr, message, *panels, refused],
            show_progress_on=[caption, ocr],
            api_name="page_describe",
            **raw,
            **page,
        )
        image.change(
            handlers.removed,
            [image, refused],
            [message, *panels, refused],
            queue=False,
            show_progress="hidden",
            api_name="page_removed",
            **raw,
            **page,
        )
        # Answer, and a click on an example (once it has filled the inputs), run the same two steps. The
        # examples are not cached: a cached answer would replay another run's tokens/s and skip Stop and the queue.
        for name, trigger in (
            ("page", run.click),
            ("page_example", examples.load_input_event.then),
        ):
            begun = trigger(
                handlers.begin,
                None,
                [message, *panels, run],
                queue=False,
                show_progress="hidden",
                api_name=f"{name}_begin",
                **page,
            )
            begun.then(
                handlers.answer,
                inputs,
                [message, *panels, run],
                concurrency_id="models",
                show_progress_on=[asym],
                api_name=f"{name}_answer",
                **raw,
                **page,
            )
        stop.click(handlers.stop, None, None, queue=False, api_name="page_stop", **page)
        api_describe.click(
            handlers.api_describe, image, [caption, ocr], api_name="describe", **raw
        )
        api_answer.click(
            handlers.api_answer,
            inputs,
            panels,
            api_name="answer",
            concurrency_id="models",
            **raw,
        )
        demo.unload(handlers.closed)
    return demo


def launch(
    demo: gr.Blocks,
    host: str = "127.0.0.1",
    port: int | None = None,
    max_file_bytes: int | None = None,
    block: bool = True,
    quiet: bool = False,
) -> gr.Blocks:
    """Serve the page (no share link, no server-side rendering); upload size limited to max_file_bytes. One
    generation runs at a time (the models are shared); the others wait in the queue, each page showing its place.
    Gradio keeps the state of SESSIONS_KEPT sessions (its default, 10,000, let a flood of new sessions grow the
    memory by gigabytes); an older session's page then starts afresh."""
    # Warnings about Gradio's own code, logged per request, tell the operator nothing: Starlette's about a name
    # Gradio's routes use, pandas' deprecations inside Gradio's queue.
    warnings.filterwarnings("ignore", message=".*HTTP_422_UNPROCESSABLE_ENTITY.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"gradio\.")
    demo.queue(default_concurrency_limit=1)
    demo.launch(
        server_name=host,
        server_port=port,
        max_file_size=max_file_bytes,
        share=False,
        ssr_mode=False,
        prevent_thread_lock=not block,
        quiet=quiet,
        show_error=False,
        allowed_paths=[str(EXAMPLES_DIR)],
        theme=THEME,
        css=CSS,
        head=HEAD,
        footer_links=["api"],
        state_session_capacity=SESSIONS_KEPT,
    )
    return demo
