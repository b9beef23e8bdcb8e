"""`asymspec-vl serve`: the OpenAI-compatible chat server (flags, then uvicorn with its limits and a bounded drain on
SIGTERM: server.py)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal

from asymspec_vl.commands import add_model_args, comma_list, positive_int
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.parallelism import refuse_pipeline_parallelism
from asymspec_vl.demo.cli import (
    add_ocr_min_confidence_arg,
    build_captioner,
    check_caption_model,
)

from .settings import ServeSettings
from .vllm_flags import add_engine_flags, engine_kwargs, refuse_unknown


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def register(sub) -> None:

    d = ServeSettings("", "")
    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible chat server: images + questions in, AsymSpec answers out",
    )
    add_model_args(p, drafter="embedded", verifier="embedded")
    p.set_defaults(backend="vllm")
    g = p.add_argument_group("server")
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (0.0.0.0: every interface)",
    )
    g.add_argument("--port", type=int, default=8000, help="port to listen on")
    g.add_argument(
        "--api-key",
        default=os.environ.get("ASYMSPEC_VL_API_KEY"),
        help="key the /v1 routes require as 'Authorization: Bearer KEY' (default: $ASYMSPEC_VL_API_KEY)",
    )
    g.add_argument(
        "--served-model-name",
        default=d.served_model_name,
        help="the model name clients send",
    )
    g.add_argument(
        "-K",
        "--K",
        dest="K",
        type=positive_int,
        default=d.K,
        help="the engine's draft tokens per step; requests may ask for any K up to it",
    )
    g.add_argument(
        "--drafter-engine",
        action="store_true",
        help="vLLM: also start an engine with the VL drafter as target, for method 'drafter'",
    )
    g.add_argument(
        "--drafter-memory",
        type=_positive_float,
        default=d.drafter_memory,
        help="the drafter engine's share of GPU memory (its gpu_memory_utilization)",
    )
    add_engine_flags(
        p.add_argument_group(
            "engine (as `vllm serve` takes them; other `vllm serve` flags are refused by name)"
        )
    )
    g = p.add_argument_group(
        "the verifier's view when a request sends no caption / OCR text"
    )
    g.add_argument(
        "--ocr",
        choices=("easyocr", "none"),
        default="easyocr",
        help="EasyOCR runs offline on the CPU",
    )
    add_ocr_min_confidence_arg(g)
    g.add_argument(
        "--caption-model",
        default="none",
        help="VLM that writes captions: 'none', 'drafter' (the VL drafter), a hub id or a path",
    )
    g.add_argument(
        "--caption-cache",
        default=None,
        help="folder caching captions / OCR by image content "
        "(default: ~/.cache/asymspec-vl/captions)",
    )
    g.add_argument(
        "--no-caption-cache",
        action="store_true",
        help="keep the caption cache in memory only",
    )
    g = p.add_argument_group("limits")
    g.add_argument(
        "--max-body-mb",
        type=_positive_float,
        default=d.max_body_bytes / 2**20,
        help="largest request body accepted, in MiB",
    )
    g.add_argument(
        "--max-image-mb",
        type=_positive_float,
        default=d.max_image_bytes / 2**20,
        help="largest image accepted, in MiB",
    )
    g.add_argument(
        "--max-image-pixels",
        type=positive_int,
        default=d.max_image_pixels,
        help="largest image accepted, in pixels (width × height)",
    )
    g.add_argument(
        "--max-request-pixels",
        type=positive_int,
        default=d.max_request_pixels,
        help="the most pixels all the images of one request may hold together (width × height, summed)",
    )
    g.add_argument(
        "--max-server-pixels",
        type=positive_int,
        default=d.max_server_pixels,
        help="the most pixels the images of all requests may hold at once while they are decoded and "
        "encoded; a request beyond it waits its turn (within --request-timeout)",
    )
    g.add_argument(
        "--max-images",
        type=positive_int,
        default=d.max_images,
        help="the most images one request's conversation may hold (all its user turns together)",
    )
    g.add_argument(
        "--max-tokens",
        type=positive_int,
        default=d.max_tokens,
        help="the largest max_tokens a request may ask for (and the default)",
    )
    g.add_argument(
        "--request-timeout",
        type=_positive_float,
        default=d.request_timeout_s,
        help="seconds",
    )
    g.add_argument(
        "--drain-timeout",
        type=_positive_float,
        default=d.drain_timeout_s,
        help="seconds requests in flight may take to finish after SIGTERM; those still running then end "
        "with a 503 ServerShuttingDownError (streams: a last error event, then [DONE])",
    )
    g.add_argument(
        "--header-timeout",
        type=_positive_float,
        default=d.header_timeout_s,
        help="seconds a client may take to send a request's headers (then: 408, connection closed)",
    )
    g.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=d.body_timeout_s,
        help="seconds a client may take to send a request's body after its headers (then: 408)",
    )
    g.add_argument(
        "--max-connections",
        type=positive_int,
        default=d.max_connections,
        help="connections held at once; one more gets 503 and is closed",
    )
    g.add_argument(
        "--allowed-media-domains",
        type=comma_list,
        default=[],
        help="hosts image URLs may be fetched from (comma list; '*': any); default: data: URLs only",
    )
    g.add_argument(
        "--allowed-local-media-path",
        default=None,
        help="a folder file:// image URLs may read from",
    )
    g.add_argument(
        "--media-fetch-timeout",
        type=_positive_float,
        default=d.media_fetch_timeout_s,
        help="seconds the whole download of an image URL may take",
    )
    # unknown_flags: what cli.main calls with the flags argparse left unread (vllm_flags.py)
    p.set_defaults(func=_serve, unknown_flags=refuse_unknown)


def settings_from_args(args):

    refuse_pipeline_parallelism(args.pipeline_parallel_size, "--pipeline-parallel-size")
    if args.text_drafter:
        raise ConfigError(
            "--text-drafter is not offered by serve: SD drafts with the VL drafter on the server"
        )
    if args.trust_remote_code:
        raise ConfigError(
            "--trust-remote-code is not offered by serve: a server never runs code from model repos"
        )
    if args.api_key is not None and not args.api_key.strip():
        raise ConfigError(
            "the API key is empty (--api-key '' or ASYMSPEC_VL_API_KEY=''): set a key, or unset "
            "ASYMSPEC_VL_API_KEY to serve without one"
        )
    engine = engine_kwargs(args, args.backend)
    if args.tensor_parallel_size is not None:
        engine = {"tensor_parallel_size": args.tensor_parallel_size, **engine}
    return ServeSettings(
        args.drafter,
        args.verifier,
        backend=args.backend,
        served_model_name=args.served_model_name,
        api_key=args.api_key,
        K=args.K,
        drafter_engine=args.drafter_engine,
        drafter_memory=args.drafter_memory,
        engine_kwargs=engine,
        dtype=args.dtype,
        device=args.device,
        max_body_bytes=int(args.max_body_mb * 2**20),
        max_image_bytes=int(args.max_image_mb * 2**20),
        max_image_pixels=args.max_image_pixels,
        max_request_pixels=args.max_request_pixels,
        max_server_pixels=args.max_server_pixels,
        max_images=args.max_images,
        max_tokens=args.max_tokens,
        request_timeout_s=args.request_timeout,
        drain_timeout_s=args.drain_timeout,
        allowed_media_domains=tuple(args.allowed_media_domains),
        allowed_local_media_path=args.allowed_local_media_path,
        media_fetch_timeout_s=args.media_fetch_timeout,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_connections=args.max_connections,
    )


def open_access_warning(host: str, api_key: str | None) -> str | None:
    """What to warn when the /v1 routes answer anyone on a network: no key, and an address not on loopback."""
    if api_key is not None or _loopback(host):
        return None
    return (
        f"asymspec-vl serve: listening on {host} with no API key: anyone who can reach this port can use the "
        "models (set ASYMSPEC_VL_API_KEY or --api-key, or bind 127.0.0.1)"
    )


def _loopback(host: str) -> bool:

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def _log_to_stderr() -> None:
    """The toolkit's INFO messages (ready, a client gone, a cache that cannot write) beside uvicorn's, as it
    writes them."""
    for name in ("asymspec_vl", "captioners"):
        log = logging.getLogger(name)
        if not log.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
            log.addHandler(handler)
        log.setLevel(logging.INFO)


def _serve(args) -> int:

    check_caption_model(
        args
    )  # the toy drafter as captioner: refused before anything loads, as by the demo
    settings = settings_from_args(args)
    from .app import create_app  # lazy: loads the web stack, torch
    from .hf_runner import HFRunner  # lazy: loads torch
    from .server import build_server  # lazy: loads the web stack
    from .vllm_runner import VLLMRunner  # lazy: loads torch

    _log_to_stderr()
    warning = open_access_warning(args.host, settings.api_key)
    if warning:
        logging.getLogger(__name__).warning(warning)
    runner = VLLMRunner if settings.backend == "vllm" else HFRunner
    app = create_app(settings, runner.load, lambda vl: build_captioner(args, vl))
    server = build_server(app, settings, args.host, args.port)

    def stop(error: BaseException) -> None:
        server.should_exit = True

    app.state.serve.on_load_failure = stop
    app.state.serve.watch.on_death = (
        stop  # engine_watch.py: a dead engine stops the server with status 1
    )
    # uvicorn drains on SIGTERM, then raises the signal again under the handler it found: make that a no-op, so a
    # drained stop exits 0 (SIGINT keeps its KeyboardInterrupt)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    server.run()
    return (
        1
        if app.state.serve.load_error is not None
        or app.state.serve.watch.dead is not None
        else 0
    )
