"""A chat completion request (vLLM's ChatCompletionRequest, OpenAI's schema plus vLLM's extensions and ours) -> a
ChatJob: the conversation (its turns, the image URLs in its user turns), the client's caption / OCR per image (or
None: the server's captioner makes them), the method and its AsymSpecConfig, and what the response carries.
Every field is served as vLLM serves it or refused here, by name (the error's `param`), before any image is
fetched or model run.

Each served field has its own small translator in SERVED (value, Translation) -> None; a translator sets
AsymSpecConfig fields (`cfg`), ChatJob fields (`job`), or what other parts of the server read (`extra`: the one
place for fields served outside the AsymSpecConfig, such as a structured-output request).

Extras (the openai client's `extra_body`):
  method          asymspec (default), floor, sd, scd, drafter
  caption, ocr    the verifier's view of the images: a string (one image) or a list with one entry per image, in
                  the order they appear; absent or null: the server's captioners make it ("" = none)
  config          AsymSpecConfig fields: K (up to the server's -K), beta, gamma, gate, lam, delta_source, bonus,
                  scd_alpha (the budget, stops and sampling come from the request's own fields)
  return_trace    the per-token sources (draft / fused / bonus / verifier / drafter / contrastive) and texts
  return_prompts  the exact prompts each model read (x_full, x_comp, x_question)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..core.config import AsymSpecConfig, as_config
from ..core.errors import ConfigError, EmptyQuestionError, InvalidTextError
from ..core.methods import method as method_named
from .http_errors import (
    MalformedRequestError,
    TooManyImagesError,
    UnknownModelError,
    UnsupportedRequestError,
    validation_problems,
)
from .settings import ServeSettings
from .structured_output import structured_output_of_request

EXTRAS = ("method", "caption", "ocr", "config", "return_trace", "return_prompts")
# read by translate() itself, or without effect on the answer
FREE = {
    "messages",
    "model",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "user",
    "request_id",
    "return_token_ids",
    "include_reasoning",
    "parallel_tool_calls",
    "spaces_between_special_tokens",
    "add_generation_prompt",
    "priority",
    "response_format",
    "structured_outputs",
}  # the last two: read whole by structured_output.py
# values of a field that change nothing (besides its default): accepted whatever the field
NEUTRAL = {
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "reasoning_effort": (None, "none"),
    "bad_words": (None, []),
    "length_penalty": (1,),
}
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
CONFIG_OWNED = (
    "max_new_tokens",
    "stop_token_ids",
    "ignore_eos",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "include_stop_str_in_output",
    "min_tokens",
    "structured_output",
    "logprobs",
)


@dataclass(frozen=True)
class ChatTurn:
    """One message of the conversation: its role (developer reads as system), its text parts joined by newlines,
    and (user turns) its image URLs in order."""

    role: str
    text: str
    image_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChatJob:
    """One chat completion as the server runs it."""

    turns: tuple[ChatTurn, ...]
    captions: tuple  # per image: the client's caption, or None (the server's captioner makes it)
    ocrs: tuple
    method: str
    cfg: AsymSpecConfig
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    return_trace: bool
    return_prompts: bool
    return_token_ids: bool
    response_id: str
    add_eos: bool = False  # stop_token_ids were sent without ignore_eos: they end an answer beside the EOS tokens
    skip_special_tokens: bool = (
        True  # the answer's text without special tokens (vLLM's default)
    )
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (with include_usage): usage in every chunk
    n: int = 1  # choices: n > 1 runs n requests (choices.py), choice i seeded seed + i as vLLM seeds them
    choice: int = 0  # this job's index among the request's choices
    extra: dict = field(
        default_factory=dict
    )  # what SERVED translators set for other parts of the server

    @property
    def image_urls(self) -> list[str]:
        return [u for t in self.turns for u in t.image_urls]


@dataclass
class Translation:
    """What the translators of a request's fields produce."""

    cfg: dict = field(default_factory=dict)  # AsymSpecConfig fields
    job: dict = field(default_factory=dict)  # ChatJob fields
    extra: dict = field(default_factory=dict)  # ChatJob.extra


def translate(request, settings: ServeSettings) -> ChatJob:
    """The ChatJob of a parsed ChatCompletionRequest; a typed error (400 / 404) naming what is not served."""
    if request.model is not None and request.model != settings.served_model_name:
        raise UnknownModelError(
            f"the model {request.model!r} does not exist here; this server serves "
            f"{settings.served_model_name!r}"
        )
    extras = dict(request.model_extra or {})
    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        raise UnsupportedRequestError(
            f"unknown field(s) {unknown}: asymspec-vl serve takes OpenAI's chat fields, "
            f"vLLM's sampling extensions and {list(EXTRAS)}",
            param=unknown[0],
        )
    out = served_fields(request)
    turns = conversation(request.messages, settings.max_images)
    n_images = sum(len(t.image_urls) for t in turns)
    name = extras.get("method", "asymspec")
    method_named(name)  # ConfigError naming the methods
    flags = {k: extras.get(k, False) for k in ("return_trace", "return_prompts")}
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise UnsupportedRequestError(
                f"{k} must be true or false, got {v!r}", param=k
            )
    stream_options = request.stream_options
    return ChatJob(
        turns,
        per_image(extras, "caption", n_images),
        per_image(extras, "ocr", n_images),
        name,
        decoding_config(request, extras.get("config"), settings, out.cfg),
        bool(request.stream),
        bool(request.stream and stream_options and stream_options.include_usage),
        flags["return_trace"],
        flags["return_prompts"],
        bool(request.return_token_ids),
        f"chatcmpl-{request.request_id}",
        continuous_usage=continuous_usage(request),
        **out.job,
        extra=out.extra,
    )


def continuous_usage(request) -> bool:
    """vLLM's should_include_usage: usage in every chunk of a stream that asked for include_usage and
    continuous_usage_stats."""
    options = request.stream_options
    return bool(
        request.stream
        and options
        and options.include_usage
        and options.continuous_usage_stats
    )


# -- the request's own fields: each served one has a translator -----------------------------------------------
def _to_config(name: str):
    """The field -> AsymSpecConfig.<name> (None: the config's default)."""

    def translate_field(value, out: Translation) -> None:
        if value is not None:
            out.cfg[name] = value

    return translate_field


def _stop(value, out: Translation) -> None:
    """stop: a string or a list of strings (vLLM's); "" and [] stop nothing."""
    stops = [value] if isinstance(value, str) else list(value or [])
    if any(s for s in stops):
        out.cfg["stop"] = tuple(s for s in stops if s)


def _stop_token_ids(value, out: Translation) -> None:
    """vLLM's stop_token_ids end an answer beside the EOS tokens (unless ignore_eos): resolved with the model's
    EOS ids once the pair is known (with_model_stops)."""
    if value:
        out.cfg["stop_token_ids"] = tuple(value)
        out.job["add_eos"] = True


def _skip_special_tokens(value, out: Translation) -> None:
    out.job["skip_special_tokens"] = bool(value)


MAX_TOP_LOGPROBS = 20  # OpenAI's cap on top_logprobs


def _logprobs(value, out: Translation) -> None:
    """logprobs=true: each emitted token's logprob under the distribution it was chosen from (core/logprobs.py)."""
    if value:
        out.cfg.setdefault("logprobs", 0)


def _top_logprobs(value, out: Translation) -> None:
    """top_logprobs: the alternatives per token (vLLM's request model refuses it without logprobs=true)."""
    if value is None or value == 0:
        return
    if not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise UnsupportedRequestError(
            f"top_logprobs={value!r} is not served: an integer from 0 to "
            f"{MAX_TOP_LOGPROBS} (OpenAI's cap)",
            param="top_logprobs",
        )
    out.cfg["logprobs"] = value


def _prompt_logprobs(value, out: Translation) -> None:
    """prompt_logprobs=k: the verifier's logprobs of its prompt (x_comp), k alternatives per token (vLLM refuses it
    with stream=true itself)."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_TOP_LOGPROBS
    ):
        raise UnsupportedRequestError(
            f"prompt_logprobs={value!r} is not served: an integer from 0 to "
            f"{MAX_TOP_LOGPROBS} (the alternatives per prompt token; -1, the whole "
            "vocabulary at every position, is not)",
            param="prompt_logprobs",
        )
    out.cfg["prompt_logprobs"] = value


MAX_CHOICES = 16  # n: each choice is a request of its own in the engine


def _n(value, out: Translation) -> None:
    """n choices: n requests over the same prepared views (choices.py)."""
    if value is None or value == 1:
        return
    if not isinstance(value, int) or not 1 <= value <= MAX_CHOICES:
        raise UnsupportedRequestError(
            f"n={value} is not served: 1 to {MAX_CHOICES} choices (each one is a request "
            "of its own)",
            param="n",
        )
    out.job["n"] = value


SERVED = {
    "temperature": _to_config("temperature"),
    "top_p": _to_config("top_p"),
    "top_k": _to_config("top_k"),
    "min_p": _to_config("min_p"),
    "seed": _to_config("seed"),
    "min_tokens": _to_config("min_tokens"),
    "ignore_eos": _to_config("ignore_eos"),
    "include_stop_str_in_output": _to_config("include_stop_str_in_output"),
    "stop": _stop,
    "stop_token_ids": _stop_token_ids,
    "skip_special_tokens": _skip_special_tokens,
    "logprobs": _logprobs,
    "top_logprobs": _top_logprobs,
    "prompt_logprobs": _prompt_logprobs,
    "n": _n,
}


def served_fields(request) -> Translation:
    """Every sent field outside FREE: translated (SERVED), or accepted at its default or a neutral value, or refused
    by name."""
    out = Translation()
    fields = type(request).model_fields
    for name in sorted((request.model_fields_set & set(fields)) - FREE):
        value = getattr(request, name)
        if name in SERVED:
            SERVED[name](value, out)
            continue
        if value in NEUTRAL.get(name, ()) or value == fields[name].get_default(
            call_default_factory=True
        ):
            continue
        raise UnsupportedRequestError(
            f"{name}{in_words(value)} is not served by asymspec-vl serve "
            f"({why_not(name)})",
            param=name,
        )
    return out


def in_words(value) -> str:
    """How an error message shows a sent value: `=2`, `="required"`; a list or object by its size (never a Python
    repr of the request's parsed objects)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return f"={json.dumps(value)}"
    if isinstance(value, (list, tuple)):
        return f" (a list of {len(value)})"
    return " (an object)"


def why_not(name: str) -> str:
    if name in (
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "bad_words",
        "allowed_token_ids",
        "use_beam_search",
        "length_penalty",
    ):
        return "the verifier's scores are used as they are: no penalties, biases or beam search"
    if name in ("tools", "tool_choice", "documents"):
        return "no tool calling"
    if name in (
        "chat_template",
        "chat_template_kwargs",
        "continue_final_message",
        "echo",
        "add_special_tokens",
    ):
        return "the prompts are the models' own chat templates over the three views"
    return "not supported"


# -- the conversation ---------------------------------------------------------------------------------
def conversation(messages: list, max_images: int) -> tuple[ChatTurn, ...]:
    """The turns of the messages: system (or developer) / user / assistant, images in user turns only, at most
    `max_images` in all, the last turn a user's with text."""
    if not messages:
        raise MalformedRequestError("messages is empty: send at least one user message")
    turns = tuple(_turn(i, m) for i, m in enumerate(messages))
    n_images = sum(len(t.image_urls) for t in turns)
    if n_images > max_images:
        raise TooManyImagesError(
            f"the conversation has {n_images} images; this server reads at most {max_images} "
            "per request (--max-images)",
            param="messages",
        )
    if turns[-1].role != "user":
        raise UnsupportedRequestError(
            f"the last message must be the user's (the answer follows it); it is "
            f"{turns[-1].role!r}",
            param="messages",
        )
    if not turns[-1].text.strip():
        raise EmptyQuestionError(
            "the question is empty: add a text part to the last user message"
        )
    return turns


def _turn(i: int, message) -> ChatTurn:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ROLES:
        raise UnsupportedRequestError(
            f"messages[{i}] has the role {json.dumps(role)}, which is not served: custom "
            f"roles are not (the drafter's and the verifier's chat templates, which build "
            f"the three views, know only {sorted(ROLES)}; tool turns need tool calling)",
            param="messages",
        )
    if message.get("tool_calls"):
        raise UnsupportedRequestError(
            f"messages[{i}] holds tool_calls: no tool calling", param="messages"
        )
    texts, urls = [], []
    for part in content_parts(message.get("content")):
        kind = part.get("type")
        if kind == "text" or (kind == "refusal" and role == "assistant"):
            text = part.get(kind)
            if not isinstance(text, str):
                raise InvalidTextError(
                    f"a {kind} part's {kind} must be a string, got {type(text).__name__}"
                )
            texts.append(text)
        elif kind == "image_url" and role == "user":
            image = part.get("image_url")
            urls.append(image.get("url") if isinstance(image, dict) else image)
        else:
            raise UnsupportedRequestError(
                f"messages[{i}] ({role}) holds content of type {kind!r}: served are text, "
                "and image_url in user messages",
                param="messages",
            )
    return ChatTurn(ROLES[role], "\n".join(texts), tuple(urls))


def content_parts(content) -> list[dict]:
    """The parts of a message's content (a string is one text part, None none); MalformedRequestError when they
    are not objects. vLLM's request model checks the parts lazily, as they are read: reading them may raise its
    ValidationError."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]

    try:
        parts = list(content or [])
    except ValidationError as e:
        raise MalformedRequestError(
            f"the message content is not a list of content parts: "
            f"{validation_problems(e)}"
        ) from e
    for part in parts:
        if not isinstance(part, dict):
            raise MalformedRequestError(
                f"a content part must be an object with a 'type' (text or image_url), got "
                f"{type(part).__name__}"
            )
    return parts


def per_image(extras: dict, name: str, n_images: int) -> tuple:
    """The client's caption (or OCR) of each image: a string for one image, a list of one string or null per image;
    absent: None for each (the server's captioner). "" stands for every image ("none" for each, and nothing for a
    conversation without images, as the docs' client example sends it); one non-empty string for several images is
    refused (which image it describes is unknown), as is a non-empty one without images."""
    value = extras.get(name)
    if value is None:
        return (None,) * n_images
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(
        v is None or isinstance(v, str) for v in values
    ):
        raise InvalidTextError(
            f"{name} must be a string or a list of strings (one per image), got "
            f"{type(value).__name__}"
        )
    if value == "":
        return ("",) * n_images
    if isinstance(value, str) and n_images > 1:
        raise UnsupportedRequestError(
            f"{name} is one string for {n_images} images: which image it describes is "
            f"unknown; send a list with one entry per image in the order they appear "
            f'("" for none, null for the server\'s own)',
            param=name,
        )
    if n_images == 0 and any(values):
        raise UnsupportedRequestError(
            f"{name} is given but the conversation holds no image: add the image, or "
            f'send "" (or leave {name} out) for a text-only conversation',
            param=name,
        )
    if n_images == 0:  # [] or only ""/null entries: nothing to describe
        return ()
    if len(values) != n_images:
        raise UnsupportedRequestError(
            f"{name} has {len(values)} entries for {n_images} image(s): send one per image, "
            "in the order they appear (a list; a string for one image)",
            param=name,
        )
    return tuple(values)


# -- the decoding settings ------------------------------------------------------------------------------
def decoding_config(
    request, config, settings: ServeSettings, sent: dict
) -> AsymSpecConfig:
    """The request's AsymSpecConfig: `config` fields over K = the server's -K; the budget from max_completion_tokens
    (or max_tokens), and the request's own sampling and stop fields (`sent`, translated)."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(
            f"config must be an object of AsymSpecConfig fields, got {type(config).__name__}"
        )
    reserved = sorted(set(CONFIG_OWNED) & set(config))
    if reserved:
        raise ConfigError(
            f"config {reserved}: use the request's own fields (max_completion_tokens, stop, "
            "stop_token_ids, ignore_eos, temperature, ..., response_format for structured_output, "
            "logprobs / top_logprobs)"
        )
    asked = [
        vars(request).get(k) for k in ("max_completion_tokens", "max_tokens")
    ]  # vars: max_tokens is deprecated
    max_tokens = next((n for n in asked if n is not None), settings.max_tokens)
    if max_tokens > settings.max_tokens:
        raise UnsupportedRequestError(
            f"max_tokens={max_tokens} is over this server's limit of {settings.max_tokens}",
            param="max_completion_tokens" if asked[0] is not None else "max_tokens",
        )
    cfg = as_config(
        {
            "K": settings.K,
            **config,
            "max_new_tokens": max_tokens,
            **sent,
            "structured_output": structured_output_of_request(request, settings),
        }
    )
    if cfg.K > settings.K:
        raise ConfigError(
            f"config K={cfg.K} is over the server's K={settings.K} (its engine drafts at most "
            f"{settings.K} tokens a step)"
        )
    return cfg


def with_model_stops(job: ChatJob, eos_ids) -> ChatJob:
    """stop_token_ids sent without ignore_eos end an answer beside the model's EOS tokens, as in vLLM."""
    if not job.add_eos or job.cfg.ignore_eos:
        return job
    ids = tuple(sorted(set(job.cfg.stop_token_ids) | set(eos_ids)))
    return dataclasses.replace(
        job, cfg=job.cfg.replace(stop_token_ids=ids), add_eos=False
    )
