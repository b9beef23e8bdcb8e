"""The demo's event handlers. The page's never raise: a bad input becomes the page's one message, the panels show
no stale answer, and no component is marked with an error badge. The API's raise gr.Error (gradio_client's AppError)."""

from __future__ import annotations

import html
import logging

import gradio as gr

from asymspec_vl.core.errors import (
    AsymSpecError,
    ConfigError,
    EmptyQuestionError,
    ImageTooLargeError,
    InvalidImageError,
    PromptTooLongError,
)

from . import chat_session, render
from .board import NOT_RUN, PANELS, WAITING, Board
from .controls import check_in_range
from .service import DemoService

log = logging.getLogger(__name__)
BUSY, READY = (
    (gr.update(interactive=False),) * 2,
    (gr.update(interactive=True),) * 2,
)  # the chat's Send, Retry
NO_ANSWER = tuple(render.panel_html(m, [], "no answer yet") for m in PANELS)
CLEARED = (
    *NO_ANSWER,
    render.stats_html([]),
    render.prompts_html(None),
    {},
)  # the panels with no answer
# The heading of the page's message, per error type (the first match in this order).
HEADINGS = (
    (ImageTooLargeError, "The image is too large"),
    (InvalidImageError, "The image cannot be used"),
    (EmptyQuestionError, "There is no question"),
    (PromptTooLongError, "The input is too long"),
    (ConfigError, "A setting is out of range"),
    (AsymSpecError, "The request cannot be served"),
)


def message(e: Exception) -> str:
    """The page's message for an error: the toolkit's typed errors in their own words, anything else a short
    note (the details go to the server log)."""
    heading = next((h for kind, h in HEADINGS if isinstance(e, kind)), None)
    if heading is None:
        log.error("demo: unexpected error", exc_info=e)
        return render.message_html(
            "Something went wrong on the server",
            f"The request failed ({type(e).__name__}); the server log has the details.",
        )
    return render.message_html(heading, str(e))


def api_error(e: Exception) -> gr.Error:
    """The API's error: the typed error's class as the title (gr.Error renders its message as HTML: escaped)."""
    if isinstance(e, AsymSpecError):
        return gr.Error(
            html.escape(str(e), quote=False),
            title=type(e).__name__,
            print_exception=False,
        )
    log.error("demo: unexpected error", exc_info=e)
    return gr.Error(
        f"the request failed ({type(e).__name__}); see the server log",
        title="Internal error",
    )


class Handlers:
    """Bound to one DemoService; each method is one event of the page or the API."""

    def __init__(self, service: DemoService):
        self.service = service

    # The page: Answer arms the session's Stop and clears the panels at once (even while the answer waits in
    # the queue), then answer() streams; outputs: message, the three panels, stats, prompts, results, the Answer
    # button.
    def begin(self, request: gr.Request):
        # an answer still running (an example clicked while it decodes) is about other inputs: it stops
        self.service.stops.stop(request.session_hash, superseded=True)
        self.service.stops.arm(request.session_hash)
        return ("", *Board.blank(WAITING).outputs(), gr.update(interactive=False))

    def answer(
        self,
        image,
        question,
        caption,
        ocr,
        K,
        beta,
        gamma,
        gate,
        max_new_tokens,
        baselines,
        temperature,
        top_p,
        seed,
        request: gr.Request,
    ):
        # the message is left alone unless this answer fails: begin() cleared it, and a refused upload meanwhile
        # (which stops this answer) writes its own
        stop = self.service.stops.current(request.session_hash)
        shown = Board.blank(NOT_RUN).outputs()
        try:
            # the page's sliders: a number typed outside one is refused by name (the API takes what the config does)
            check_in_range(
                self.service.sliders,
                K=K,
                beta=beta,
                gamma=gamma,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
            )
            for shown in self.service.answer(
                image,
                question,
                caption,
                ocr,
                K,
                beta,
                gamma,
                gate,
                max_new_tokens,
                baselines,
                temperature,
                top_p,
                seed,
                stop=stop,
            ):
                yield (gr.skip(), *shown, gr.skip())
            if (
                stop is not None and stop.superseded
            ):  # a new image arrived: this answer is about the old one
                shown = CLEARED
            yield (gr.skip(), *shown, gr.update(interactive=True))
        except Exception as e:
            yield (message(e), *shown, gr.update(interactive=True))
        finally:
            self.service.stops.release(request.session_hash, stop)

    def stop(self, request: gr.Request) -> None:
        self.service.stops.stop(request.session_hash)

    def closed(self, request: gr.Request) -> None:
        """The tab closed or reloaded (Gradio's unload): the session's Stop signal goes."""
        self.service.stops.drop(request.session_hash)

    def describe(self, image, request: gr.Request):
        """Upload: a running answer (about the old image) stops and its panels clear, the verifier's view is
        prefilled; a refused file leaves the image box (no broken-image icon). Outputs: image, caption, OCR,
        message, the three panels, stats, prompts, results, whether the file was refused (see removed())."""
        self.service.stops.stop(request.session_hash, superseded=True)
        try:
            caption, ocr = self.service.describe_image(image)
        except Exception as e:
            return (None, "", "", message(e), *CLEARED, True)
        return (gr.skip(), caption, ocr, "", *CLEARED, False)

    def removed(self, image, refused: bool, request: gr.Request):
        """The image box changed. Emptied (the user removed the image, or the page refused a file before
        uploading it: wrong type, too big): a running answer stops, the answers and any old message go, since
        they were about an image no longer shown; emptied by describe() after a refusal: its message stays.
        Outputs: message, the three panels, stats, prompts, results, refused (reset)."""
        if image is not None or refused:
            return (gr.skip(),) * (1 + len(CLEARED)) + (False,)
        self.service.stops.stop(request.session_hash, superseded=True)
        return ("", *CLEARED, False)

    # The API (gradio_client): errors raise, as gr.Error with the typed error's class as title.
    def api_answer(
        self,
        image,
        question,
        caption,
        ocr,
        K,
        beta,
        gamma,
        gate,
        max_new_tokens,
        baselines,
        temperature=None,
        top_p=None,
        seed=None,
    ):
        try:
            yield from self.service.answer(
                image,
                question,
                caption,
                ocr,
                K,
                beta,
                gamma,
                gate,
                max_new_tokens,
                baselines,
                temperature,
                top_p,
                seed,
            )
        except Exception as e:
            raise api_error(e) from e

    def api_describe(self, image):
        try:
            return self.service.describe_image(image)
        except Exception as e:
            raise api_error(e) from e

    # The chat tab: Send (or Retry) shows the user's message (or drops the last reply) at once, arms Stop and
    # disables Send and Retry, then chat_answer streams the reply and enables them again. Outputs: the chat's
    # message, the chatbot, the conversation (state), the status line, Send, Retry, and for Send the message box.
    def chat_send(self, question, turns, request: gr.Request):
        try:
            turns = chat_session.with_question(turns or [], question)
        except Exception as e:
            return (
                message(e),
                gr.skip(),
                gr.skip(),
                "",
                gr.skip(),
                gr.skip(),
                gr.skip(),
            )
        self._arm(request)
        return ("", turns, turns, "waiting…", *BUSY, "")

    def chat_retry(self, turns, request: gr.Request):
        try:
            turns = chat_session.for_retry(turns or [])
        except Exception as e:
            return (message(e), gr.skip(), gr.skip(), "", gr.skip(), gr.skip())
        self._arm(request)
        return ("", turns, turns, "waiting…", *BUSY)

    def chat_answer(
        self,
        turns,
        image,
        caption,
        ocr,
        method,
        K,
        beta,
        gamma,
        gate,
        max_new_tokens,
        temperature,
        top_p,
        seed,
        request: gr.Request,
    ):
        """The reply to the last user message (none when Send or Retry refused: the last turn is no question)."""
        if not turns or turns[-1]["role"] != "user":
            yield (gr.skip(),) * 6
            return
        stop = self.service.stops.current(request.session_hash)
        shown, status = turns, ""
        try:
            check_in_range(
                self.service.sliders,
                K=K,
                beta=beta,
                gamma=gamma,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
            )
            cfg = self.service.config(
                K, beta, gamma, gate, max_new_tokens, temperature, top_p, seed
            )
            for shown, status in chat_session.reply(
                self.service, turns, image, caption, ocr, method, cfg, stop=stop
            ):
                yield (gr.skip(), shown, shown, status, gr.skip(), gr.skip())
            yield (gr.skip(), shown, shown, status, *READY)
        except Exception as e:
            yield (
                message(e),
                turns,
                turns,
                "failed: see the message (Retry answers again)",
                *READY,
            )
        finally:
            self.service.stops.release(request.session_hash, stop)

    def chat_clear(self, request: gr.Request):
        """Clear (or a new image): a running reply stops, the conversation goes. Outputs as chat_retry's."""
        self.service.stops.stop(request.session_hash, superseded=True)
        return ("", [], [], "", *READY)

    def chat_describe(self, image, request: gr.Request):
        """The chat's image changed: the conversation (about the old image) goes, the verifier's view is
        prefilled. Outputs: caption, OCR, then chat_clear's."""
        cleared = self.chat_clear(request)
        if image is None:
            return ("", "", *cleared)
        try:
            caption, ocr = self.service.describe_image(image)
        except Exception as e:
            return ("", "", message(e), *cleared[1:])
        return (caption, ocr, *cleared)

    def _arm(self, request: gr.Request) -> None:
        self.service.stops.stop(request.session_hash, superseded=True)
        self.service.stops.arm(request.session_hash)
