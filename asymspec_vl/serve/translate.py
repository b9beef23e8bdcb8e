"""A chat completion request (vLLM's ChatCompletionRequest, OpenAI's schema plus extras) -> a ChatJob: the question,
the image URL, the client's caption / OCR (or None: the server's captioner makes them), the method and its
AsymSpecConfig, and what the response carries. Everything the server does not serve is refused here, naming
the field, before any image is fetched or model run.

Extras (the openai client's `extra_body`):
  method          asymspec (default), floor, sd, scd, drafter
  caption, ocr    the verifier's view of the image; absent or null: the server's captioners make it ("" = none)
  config          AsymSpecConfig fields: K (up to the server's -K), beta, gamma, gate, lam, delta_source, bonus,
                  scd_alpha (max_new_tokens and stop_token_ids come from max_tokens and stop_token_ids)
  return_trace    the per-token sources (draft / fused / bonus / verifier / drafter / contrastive) and texts
  return_prompts  the exact prompts each model read (x_full, x_comp, x_question)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import AsymSpecConfig, as_config
from ..errors import ConfigError, EmptyQuestionError, InvalidImageError, InvalidTextError
from ..methods import method as method_named
from .errors import (MalformedRequestError, TooManyImagesError, UnknownModelError, UnsupportedRequestError,
                     validation_problems)
from .settings import ServeSettings
from .structured_output import structured_output_of_request

EXTRAS = ("method", "caption", "ocr", "config", "return_trace", "return_prompts")
# fields served as sent (checked below); every other field must keep its default or a neutral value
FREE = {"messages", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "user", "seed",
        "stop_token_ids", "request_id", "return_token_ids", "include_reasoning", "parallel_tool_calls",
        "response_format", "structured_outputs"}  # the last two: structured_output.py
NEUTRAL = {"temperature": (None, 0), "top_p": (None, 1), "n": (None, 1), "top_k": (None, 0, -1), "min_p": (None, 0),
           "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "repetition_penalty": (None, 1),
           "logit_bias": (None, {}), "logprobs": (None, False), "top_logprobs": (None, 0), "stop": (None, [], ""),
           "tools": (None, []), "tool_choice": (None, "none", "auto"), "reasoning_effort": (None, "none")}
GREEDY = ("temperature", "top_p", "n", "top_k", "min_p", "presence_penalty", "frequency_penalty",
          "repetition_penalty", "logit_bias", "logprobs", "top_logprobs", "use_beam_search", "min_tokens",
          "bad_words", "allowed_token_ids")


@dataclass(frozen=True)
class ChatJob:
    """One chat completion as the server runs it."""

    question: str
    image_url: str
    caption: str | None  # None: the server's captioner makes it
    ocr: str | None
    method: str
    cfg: AsymSpecConfig
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    return_trace: bool
    return_prompts: bool
    return_token_ids: bool
    response_id: str


def translate(request, settings: ServeSettings) -> ChatJob:
    """The ChatJob of a parsed ChatCompletionRequest; a typed error (400 / 404) naming what is not served."""
    if request.model is not None and request.model != settings.served_model_name:
        raise UnknownModelError(f"the model {request.model!r} does not exist here; this server serves "
                                f"{settings.served_model_name!r}")
    extras = dict(request.model_extra or {})
    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        raise UnsupportedRequestError(f"unknown field(s) {unknown}: asymspec-vl serve takes OpenAI's chat fields "
                                      f"and {list(EXTRAS)}")
    check_served_fields(request)
    question, image_url = user_message(request.messages)
    name = extras.get("method", "asymspec")
    method_named(name)  # ConfigError naming the methods
    flags = {k: extras.get(k, False) for k in ("return_trace", "return_prompts")}
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise UnsupportedRequestError(f"{k} must be true or false, got {v!r}")
    stream_options = request.stream_options
    return ChatJob(question, image_url, _text(extras, "caption"), _text(extras, "ocr"), name,
                   decoding_config(request, extras.get("config"), settings), bool(request.stream),
                   bool(request.stream and stream_options and stream_options.include_usage), flags["return_trace"],
                   flags["return_prompts"], bool(request.return_token_ids), f"chatcmpl-{request.request_id}")


def check_served_fields(request) -> None:
    """Refuse every sent field outside FREE that is neither its default nor a neutral value."""
    fields = type(request).model_fields
    for name in sorted((request.model_fields_set & set(fields)) - FREE):
        value = getattr(request, name)
        if value in NEUTRAL.get(name, ()) or value == fields[name].get_default(call_default_factory=True):
            continue
        if name in GREEDY:
            raise UnsupportedRequestError(f"{name}={value!r} is not supported: AsymSpec decodes greedily (temperature "
                                          "0, one choice, no logprobs, penalties or logit bias)")
        raise UnsupportedRequestError(f"{name}={value!r} is not supported by asymspec-vl serve")


def user_message(messages: list) -> tuple[str, str]:
    """(question, image URL) of the one user message: its text parts joined by newlines, its one image_url."""
    if len(messages) != 1 or messages[0].get("role") != "user":
        roles = [m.get("role") for m in messages]
        raise UnsupportedRequestError(f"send one user message (an image and a question); got the roles {roles}")
    texts, urls = [], []
    for part in content_parts(messages[0].get("content")):
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidTextError(f"a text part's text must be a string, got {type(text).__name__}")
            texts.append(text)
        elif kind == "image_url":
            image = part.get("image_url")
            urls.append(image.get("url") if isinstance(image, dict) else image)
        else:
            raise UnsupportedRequestError(f"message content of type {kind!r} is not supported: send text and "
                                          "one image_url")
    if not urls:
        raise InvalidImageError("the message has no image: add an image_url part (a data: URL)")
    if len(urls) > 1:
        raise TooManyImagesError(f"the message has {len(urls)} images; a request reads one")
    question = "\n".join(texts)
    if not question.strip():
        raise EmptyQuestionError("the question is empty: add a text part to the user message")
    return question, urls[0]


def content_parts(content) -> list[dict]:
    """The parts of a message's content (a string is one text part); MalformedRequestError when they are not
    objects. vLLM's request model checks the parts lazily, as they are read: reading them may raise its
    ValidationError."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    from pydantic import ValidationError

    try:
        parts = list(content or [])
    except ValidationError as e:
        raise MalformedRequestError(f"the message content is not a list of content parts: "
                                    f"{validation_problems(e)}") from e
    for part in parts:
        if not isinstance(part, dict):
            raise MalformedRequestError(f"a content part must be an object with a 'type' (text or image_url), got "
                                        f"{type(part).__name__}")
    return parts


def decoding_config(request, config, settings: ServeSettings) -> AsymSpecConfig:
    """The request's AsymSpecConfig: `config` fields over K = the server's -K, max_tokens and stop_token_ids."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(f"config must be an object of AsymSpecConfig fields, got {type(config).__name__}")
    reserved = sorted({"max_new_tokens", "stop_token_ids", "structured_output"} & set(config))
    if reserved:
        raise ConfigError(f"config {reserved}: use the request's max_tokens and stop_token_ids (and response_format "
                          "for structured_output)")
    sent = [vars(request).get(k) for k in ("max_completion_tokens", "max_tokens")]  # vars: max_tokens is deprecated
    max_tokens = next((n for n in sent if n is not None), settings.max_tokens)
    if max_tokens > settings.max_tokens:
        raise UnsupportedRequestError(f"max_tokens={max_tokens} is over this server's limit of {settings.max_tokens}")
    cfg = as_config({"K": settings.K, **config, "max_new_tokens": max_tokens,
                     "stop_token_ids": request.stop_token_ids or None,
                     "structured_output": structured_output_of_request(request, settings)})
    if cfg.K > settings.K:
        raise ConfigError(f"config K={cfg.K} is over the server's K={settings.K} (its engine drafts at most "
                          f"{settings.K} tokens a step)")
    return cfg


def _text(extras: dict, name: str) -> str | None:
    value = extras.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidTextError(f"{name} must be a string, got {type(value).__name__}")
    return value
