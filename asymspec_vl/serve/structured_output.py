"""A chat request's constrained-output fields -> its AsymSpecConfig.structured_output: OpenAI's `response_format`
(text, json_object, json_schema) and vLLM's `structured_outputs` (json, regex, choice, grammar, json_object), mapped
as vLLM's own server maps them (ChatCompletionRequest.to_sampling_params). The transformers backend refuses both."""

from __future__ import annotations

from ..backends.vllm.grammar import check_compiles
from ..core import errors
from ..core.errors import ConfigError
from ..core.structured import KINDS, StructuredOutput, structured_output_of
from .http_errors import UnenforcedSchemaError, UnsupportedRequestError
from .settings import ServeSettings

FIELDS = ("response_format", "structured_outputs")
_OPTIONS = {
    "disable_any_whitespace": False,
    "disable_additional_properties": False,
    "whitespace_pattern": None,
    "structural_tag": None,
}  # StructuredOutputsParams fields beside the constraint: served at their defaults


def structured_output_of_request(
    request, settings: ServeSettings
) -> StructuredOutput | None:
    """The StructuredOutput a ChatCompletionRequest asks for (None: none, or response_format "text");
    UnsupportedRequestError naming the field for what is not served (UnenforcedSchemaError: a JSON schema whose
    keywords the grammar would not enforce)."""
    sent = {}
    response_format = request.response_format
    if response_format is not None and getattr(response_format, "type", None) != "text":
        sent["response_format"] = from_response_format(response_format)
    if request.structured_outputs is not None:
        sent["structured_outputs"] = from_structured_outputs(request.structured_outputs)
    if not sent:
        return None
    if len(sent) > 1:
        raise UnsupportedRequestError(
            "send one of response_format and structured_outputs, not both"
        )
    ((field, value),) = sent.items()
    if settings.backend != "vllm":
        raise UnsupportedRequestError(
            f"{field} is not supported on the {settings.backend!r} backend: constrained "
            "output (JSON, a schema, a regex) is served by the vLLM backend only "
            "(start the server with --backend vllm)"
        )
    try:
        constraint = structured_output_of(value)
    except ConfigError as e:
        raise UnsupportedRequestError(f"{field}: {e}") from e

    try:
        check_compiles(constraint, field)
    except errors.UnenforcedSchemaError as e:
        raise UnenforcedSchemaError(str(e), field, e.keywords) from e
    except ConfigError as e:
        raise UnsupportedRequestError(str(e)) from e
    return constraint


def from_response_format(response_format) -> dict:
    """OpenAI's response_format -> {"json_object": True} | {"json": schema}."""
    kind = getattr(response_format, "type", None)
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        schema = getattr(response_format.json_schema, "json_schema", None)
        if schema is None:
            raise UnsupportedRequestError(
                'response_format {"type": "json_schema"} needs json_schema.schema (the '
                "JSON schema of the answer)"
            )
        return {"json": schema}
    raise UnsupportedRequestError(
        f"response_format of type {kind!r} is not supported: use text, json_object or "
        "json_schema"
    )


def from_structured_outputs(params) -> dict:
    """vLLM's StructuredOutputsParams -> {kind: value}: exactly one constraint, its other options at their
    defaults."""
    options = sorted(
        k for k, default in _OPTIONS.items() if getattr(params, k, default) != default
    )
    if options:
        raise UnsupportedRequestError(
            f"structured_outputs {options} are not supported: send one of {list(KINDS)}"
        )
    given = {
        k: getattr(params, k) for k in KINDS if getattr(params, k, None) is not None
    }
    if len(given) != 1:
        raise UnsupportedRequestError(
            f"structured_outputs must hold exactly one of {list(KINDS)}, got "
            f"{sorted(given) or 'none'}"
        )
    return given
