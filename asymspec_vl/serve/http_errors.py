"""The server's typed errors and their HTTP form: an OpenAI error object {"error": {message, type, param, code}}.

Every error a request can get is an AsymSpecError; its status comes from its class (the first match of
STATUS in the class's method resolution order), its `type` is the class name, so a client (and the
/metrics error counter) can tell an InvalidImageError from a PromptTooLongError."""

from __future__ import annotations

from ..core import errors
from ..core.errors import AsymSpecError, ConfigError, InputError


class MalformedRequestError(InputError):
    """The body is not JSON, or not a chat completion request (a missing or mistyped field)."""


class _NamesItsField(InputError):
    """An error about one field of the request: `param` names it in the OpenAI error object."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class UnsupportedRequestError(_NamesItsField):
    """A field of the request the server does not serve (penalties, tools, n > 1, ...)."""


class UnenforcedSchemaError(UnsupportedRequestError):
    """A JSON schema holding keywords the engine's grammar would not enforce: the library's UnenforcedSchemaError,
    naming the field; `keywords`: [(JSON pointer of the keyword, why)]."""

    def __init__(self, message: str, param: str, keywords: list[tuple[str, str]]):
        super().__init__(message, param)
        self.keywords = list(keywords)


class TooManyImagesError(_NamesItsField, errors.TooManyImagesError):
    """More images in a request than the server reads (--max-images): the library's TooManyImagesError, naming
    the field."""


class UnknownModelError(InputError):
    """The request names a model this server does not serve."""


class BodyTooLargeError(InputError):
    """The request body is larger than the server accepts."""


class RouteNotFoundError(AsymSpecError):
    """No route at this path."""


class MethodNotAllowedError(AsymSpecError):
    """The route exists, but not for this HTTP method."""


class AuthenticationError(AsymSpecError):
    """A missing or wrong API key."""


class ServerNotReadyError(AsymSpecError):
    """The models are still loading (or failed to load)."""


class RequestTimeoutError(AsymSpecError):
    """A request ran past the server's per-request timeout; it was aborted in the engine."""


class ServerShuttingDownError(AsymSpecError):
    """The server is stopping (SIGTERM) and the request was still running when its drain timeout expired."""


class ServerBusyError(AsymSpecError):
    """The server holds as many connections as it may (--max-connections)."""


class RequestReadTimeoutError(AsymSpecError):
    """The request's headers or body did not arrive within the server's read timeouts."""


class GenerationFailedError(AsymSpecError):
    """The model run failed on a request that passed validation (the engine's message says why)."""


STATUS: dict[type, int] = {
    UnknownModelError: 404,
    BodyTooLargeError: 413,
    InputError: 400,
    ConfigError: 400,
    RouteNotFoundError: 404,
    MethodNotAllowedError: 405,
    AuthenticationError: 401,
    ServerNotReadyError: 503,
    ServerShuttingDownError: 503,
    ServerBusyError: 503,
    RequestReadTimeoutError: 408,
    RequestTimeoutError: 504,
}


def validation_problems(error) -> str:
    """A pydantic ValidationError's first problems, one line: "where: what (pydantic's kind); ..." (the kind, e.g.
    less_than_equal, as vLLM's server shows it)."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']} ({e['type']})"
        for e in error.errors()[:5]
    )


def status_of(error: BaseException) -> int:
    """The HTTP status of an error: 500 for anything that is not a known client or availability error."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(error: BaseException) -> dict:
    """The OpenAI error object of `error` (vLLM's ErrorResponse schema)."""
    from vllm.entrypoints.openai.engine.protocol import (
        ErrorInfo,
        ErrorResponse,
    )  # lazy: loads vLLM

    info = ErrorInfo(
        message=str(error) or type(error).__name__,
        type=type(error).__name__,
        param=getattr(error, "param", None),
        code=status_of(error),
    )
    return ErrorResponse(error=info).model_dump()
