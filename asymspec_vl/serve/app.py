"""The ASGI app of `asymspec-vl serve` (FastAPI): POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics;
vLLM's SageMaker routes POST /invocations (chat completions) and GET/POST /ping (= /health).

The app listens at once and loads the models in the background: until they are ready, /health and the /v1 routes
answer 503. /v1 routes need `Authorization: Bearer <key>` when the server has a key (compared in constant time);
/health and /metrics do not, as in vLLM's server. Errors are OpenAI error objects (http_errors.py)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from pydantic_core import from_json
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..core.errors import AsymSpecError
from . import choices
from .captioning import ViewMaker
from .chat import ChatService
from .engine_watch import AnswerUnexpected, EngineWatch, is_engine_dead
from .http_errors import (
    AuthenticationError,
    BodyTooLargeError,
    MalformedRequestError,
    MethodNotAllowedError,
    RouteNotFoundError,
    ServerNotReadyError,
    UnsupportedRequestError,
    error_body,
    status_of,
    validation_problems,
)
from .metrics import ServeMetrics
from .responses import pair_card
from .settings import ServeSettings
from .translate import translate

logger = logging.getLogger(__name__)


class ServerState:
    """What the routes share: settings, metrics, and once loaded the chat service (runner + captioners)."""

    def __init__(self, settings: ServeSettings):
        self.settings, self.metrics = (
            settings,
            ServeMetrics(settings.served_model_name, settings.K),
        )
        self.service: ChatService | None = None
        self.load_error: BaseException | None = None
        self.on_load_failure: Callable[[BaseException], None] = lambda e: None
        self.watch = EngineWatch()

    def ready(self) -> ChatService:
        if self.watch.dead is not None:
            raise ServerNotReadyError(
                f"the vLLM engine died ({type(self.watch.dead).__name__}: {self.watch.dead}); "
                "this server is exiting and must be restarted"
            )
        if self.service is not None:
            return self.service
        if self.load_error is not None:
            raise ServerNotReadyError(
                f"the models failed to load: {type(self.load_error).__name__}: {self.load_error}"
            )
        raise ServerNotReadyError("the models are loading; try again in a moment")

    async def load(self, load_runner, build_captioner) -> None:
        """load_runner(settings, loop) -> Runner and build_captioner(vl) -> captioner or None, off the event loop."""
        try:
            runner = await asyncio.to_thread(
                load_runner, self.settings, asyncio.get_running_loop()
            )
            views = ViewMaker(
                await asyncio.to_thread(build_captioner, runner.vl)
                if build_captioner
                else None
            )
            self.metrics.cache = {
                k: c for k, c in views.captioners.items() if c is not None
            }
            self.service = ChatService(self.settings, runner, views, self.metrics)
            logger.info(
                "asymspec-vl serve: ready (%s backend, methods %s; %s)",
                self.settings.backend,
                runner.methods,
                runner.vl.pair.vocabulary.line(),
            )
        except Exception as e:
            logger.exception("asymspec-vl serve: loading the models failed")
            self.load_error = e
            self.on_load_failure(e)

    def begin_drain(self) -> None:
        """uvicorn's graceful shutdown started: requests still running after the drain timeout end with an error."""
        if self.service is not None:
            self.service.begin_drain()

    def close(self) -> None:
        if self.service is not None:
            self.service.views.close()
            self.service.runner.close()


def create_app(settings: ServeSettings, load_runner, build_captioner=None) -> FastAPI:
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = asyncio.create_task(state.load(load_runner, build_captioner))
        watching = asyncio.create_task(_watch(state, loading))
        yield
        watching.cancel()
        await loading  # a load in progress runs to its end (its engines must be shut down, not orphaned)
        state.close()

    # no /docs, /redoc or /openapi.json: they would answer without the key (and load Swagger from a CDN)
    app = FastAPI(
        title="asymspec-vl",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.serve = state

    @app.exception_handler(StarletteHTTPException)
    async def route_error(request: Request, e: StarletteHTTPException):
        """Starlette's own 404 / 405 (no such route or method) as OpenAI error objects."""
        if e.status_code == 405:
            error = MethodNotAllowedError(
                f"{request.method} is not allowed on {request.url.path} (allowed: "
                f"{(e.headers or {}).get('Allow', 'none')})"
            )
        else:
            error = RouteNotFoundError(
                f"no route {request.method} {request.url.path}: this server answers POST "
                "/v1/chat/completions (or /invocations), GET /v1/models, GET /health (or "
                "/ping) and GET /metrics"
            )
        return JSONResponse(
            error_body(error), status_code=status_of(error), headers=e.headers
        )

    @app.exception_handler(AsymSpecError)
    async def known_error(request: Request, e: AsymSpecError):
        state.metrics.error(e)
        return JSONResponse(error_body(e), status_code=status_of(e))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, e: ClientDisconnect):
        """The client left before its whole body arrived: nobody is there to answer, and nothing went wrong here."""
        logger.info(
            "asymspec-vl serve: a client left before sending its whole request body"
        )
        return Response(status_code=400)

    def unexpected(e: BaseException) -> Response:
        """Answered by AnswerUnexpected (engine_watch.py): the connection stays open. A dead engine is a 503."""
        state.metrics.error(e)
        if is_engine_dead(e):
            state.watch.died(e)
            try:
                state.ready()
            except ServerNotReadyError as dead:
                return JSONResponse(error_body(dead), status_code=status_of(dead))
        logger.exception("asymspec-vl serve: an unexpected error", exc_info=e)
        return JSONResponse(error_body(e), status_code=500)

    app.add_middleware(AnswerUnexpected, answer=unexpected)

    async def authorized(request: Request) -> None:
        key = settings.api_key
        if key is None:
            return
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {key}".encode()):
            raise AuthenticationError(
                "a missing or wrong API key: send 'Authorization: Bearer <key>'"
            )

    @app.get("/health")
    @app.get("/ping")
    @app.post("/ping")
    async def health() -> Response:
        """/ping (GET or POST) is vLLM's SageMaker health route: the same answer as /health."""
        await state.ready().runner.check_health()
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> Response:
        if state.service is not None:
            state.metrics.engine = await state.service.runner.engine_gauges()
            state.metrics.scheduler = await state.service.runner.scheduler_gauges()
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", dependencies=[Depends(authorized)])
    async def models():
        from vllm.entrypoints.openai.engine.protocol import (
            ModelCard,
            ModelList,
        )  # lazy: loads vLLM

        # once loaded, the pair beside vLLM's fields: its models and what their vocabularies share
        extra = (
            {"asymspec": pair_card(state.service.runner.vl)}
            if state.service is not None
            else {}
        )
        card = ModelCard(
            id=settings.served_model_name,
            owned_by="asymspec-vl",
            root=settings.verifier,
            **extra,
        )
        return JSONResponse(ModelList(data=[card]).model_dump())

    @app.post("/v1/chat/completions", dependencies=[Depends(authorized)])
    async def chat_completions(raw_request: Request):
        service = state.ready()
        job = translate(
            parse_chat_request(await read_body(raw_request, settings.max_body_bytes)),
            settings,
        )
        return await _respond(service, job, raw_request=raw_request)

    @app.post("/invocations", dependencies=[Depends(authorized)])
    async def invocations(raw_request: Request):
        """vLLM's SageMaker route: a chat completion body is answered as /v1/chat/completions answers it; any other
        kind of request (completion, embedding, ...) is refused by name. Unlike vLLM's, it needs the key."""
        service = state.ready()
        body = await read_body(raw_request, settings.max_body_bytes)
        if not _is_chat_body(body):
            raise UnsupportedRequestError(
                "/invocations serves chat completion requests only (a body with "
                "'messages'); completions, embeddings and pooling are not served here",
                param="messages",
            )
        return await _respond(
            service,
            translate(parse_chat_request(body), settings),
            raw_request=raw_request,
        )

    return app


async def _watch(state: ServerState, loading: asyncio.Task) -> None:
    """Once the models are loaded, the engine watch (engine_watch.py) polls the runner's health."""
    await asyncio.shield(loading)
    if state.service is not None:
        await state.watch.run(state.service.runner.check_health)


async def _respond(service: ChatService, job, raw_request: Request):
    """Answer a checked job; a client that disconnects cancels this (and so aborts its request in the engine)."""
    from vllm.entrypoints.utils import with_cancellation  # lazy: loads vLLM

    @with_cancellation
    async def respond(raw_request: Request):
        prepared = await service.prepare(job)
        model = service.settings.served_model_name
        if job.stream:
            return StreamingResponse(
                choices.events(service, prepared, model), media_type="text/event-stream"
            )
        response = await choices.answer(service, prepared, model)
        # every field, None ones as null, as vLLM's model_dump() sends them
        return JSONResponse(response.model_dump())

    return await respond(raw_request=raw_request)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, at most `limit` bytes (413 beyond). A body declared over twice the limit is refused unread; a
    smaller one is read to its end first (discarding past the limit) so that its client gets the 413 cleanly."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > 2 * limit:
        raise BodyTooLargeError(
            f"the request body is {declared} bytes; the limit is {limit}"
        )
    body, size = bytearray(), 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            body += chunk
        elif size > 2 * limit:
            break
    if size > limit:
        raise BodyTooLargeError(f"the request body is over the limit of {limit} bytes")
    return bytes(body)


def _is_chat_body(body: bytes) -> bool:
    """Whether /invocations reads a body as a chat completion: any body but a JSON object without 'messages' (a
    completion, an embedding, ...). What is not a JSON object (unreadable, nested past the parser's depth limit, a
    list) is refused by parse_chat_request then, with the 400 /v1/chat/completions gives. pydantic's parser, not
    json.loads: a deeply nested body is its ValueError, where json.loads raised a RecursionError (a 500)."""
    try:
        parsed = from_json(body)
    except ValueError:
        return True
    return not isinstance(parsed, dict) or "messages" in parsed


def parse_chat_request(body: bytes):
    """vLLM's ChatCompletionRequest of the body; MalformedRequestError listing what is wrong. The body must be one
    JSON object: vLLM's before-validators assume one (and some fields of the wrong type), and raise TypeError /
    AttributeError where pydantic would have listed the problem."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionRequest,
    )  # lazy: loads vLLM

    if not body.lstrip(b" \t\r\n").startswith(b"{"):
        raise MalformedRequestError(
            "the body must be a JSON object (a chat completion request)"
        )
    try:
        return ChatCompletionRequest.model_validate_json(body)
    except ValidationError as e:
        raise MalformedRequestError(
            f"the body is not a chat completion request: {validation_problems(e)}"
        ) from e
    except (
        TypeError,
        AttributeError,
        ValueError,
    ) as e:  # a vLLM validator met a field of the wrong type
        raise MalformedRequestError(
            f"the body is not a chat completion request: a field has the wrong type "
            f"({type(e).__name__}: {e})"
        ) from e
