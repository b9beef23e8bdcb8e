"""ServeSettings: what `asymspec-vl serve` serves (models, engines) and the limits it holds every request to."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core.errors import ConfigError
from ..core.limits import LIMITS

BACKENDS = ("vllm", "hf")


@dataclass(frozen=True)
class ServeSettings:
    """The models, the engine options passed to vLLM, and the per-request limits (checked before any model runs)."""

    drafter: str
    verifier: str
    backend: str = "vllm"
    served_model_name: str = "asymspec-vl"
    api_key: str | None = (
        None  # None: no key; /v1/* then answers anyone who can reach the port
    )
    K: int = (
        LIMITS.speculative_tokens
    )  # the speculative engine's num_speculative_tokens: requests ask for K <= it
    drafter_engine: bool = False  # vLLM: a second engine with the VL drafter as target serves method "drafter"
    drafter_memory: float = (
        0.1  # that engine's gpu_memory_utilization (a GPU share of its own)
    )
    engine_kwargs: dict = field(
        default_factory=dict
    )  # tensor / data parallel size, max_model_len, ...
    dtype: str = "auto"
    device: str | None = None  # hf backend
    # per-request limits
    max_body_bytes: int = LIMITS.body_bytes
    max_image_bytes: int = LIMITS.image_bytes
    max_image_pixels: int = LIMITS.image_pixels
    max_images: int = LIMITS.images_per_request  # images in one request's conversation
    max_request_pixels: int = (
        LIMITS.image_pixels
    )  # all the images of one request together (one at the cap)
    max_server_pixels: int = (
        LIMITS.server_pixels
    )  # all requests' images being decoded / encoded at once
    max_tokens: int = (
        LIMITS.answer_tokens
    )  # the largest max_tokens a request may ask for (and its default)
    request_timeout_s: float = 600.0
    drain_timeout_s: float = (
        30.0  # SIGTERM: how long requests in flight may take to finish (then: an error)
    )
    # the connection (server.py): how long a client may take to send its headers / its body, how many it may hold
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 256
    # where images may come from besides data: URLs (vLLM's own server flags)
    allowed_media_domains: tuple[
        str, ...
    ] = ()  # http(s) hosts; "*" allows any; empty: no fetching
    allowed_local_media_path: str | None = (
        None  # a folder file:// URLs may read from; None: none
    )
    media_fetch_timeout_s: float = 10.0  # the whole download of an image URL

    def __post_init__(self) -> None:
        _check(self.backend in BACKENDS, "backend", self.backend, f"one of {BACKENDS}")
        _check(
            isinstance(self.served_model_name, str)
            and bool(self.served_model_name.strip()),
            "served_model_name",
            self.served_model_name,
            "a non-empty name",
        )
        _check(
            self.api_key is None
            or (isinstance(self.api_key, str) and bool(self.api_key.strip())),
            "api_key",
            "<hidden>",
            "a non-empty string or None",
        )
        _check(
            isinstance(self.K, int) and 1 <= self.K <= 16,
            "K",
            self.K,
            "an integer in [1, 16]",
        )
        _check(
            _positive(self.drafter_memory) and self.drafter_memory < 1,
            "drafter_memory",
            self.drafter_memory,
            "a fraction in (0, 1)",
        )
        share = self.engine_kwargs.get("gpu_memory_utilization")
        if (
            self.drafter_engine
            and share is not None
            and share + self.drafter_memory > 1
        ):
            raise ConfigError(
                f"--gpu-memory-utilization {share} plus the drafter engine's --drafter-memory "
                f"{self.drafter_memory} exceed the whole GPU: lower one of them"
            )
        for name in (
            "max_body_bytes",
            "max_image_bytes",
            "max_image_pixels",
            "max_images",
            "max_tokens",
            "max_request_pixels",
            "max_server_pixels",
            "max_connections",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                name,
                value,
                "an integer >= 1",
            )
        _check(
            self.max_server_pixels >= self.max_request_pixels,
            "max_server_pixels",
            self.max_server_pixels,
            f"at least max_request_pixels ({self.max_request_pixels}): a request at its limit must fit",
        )
        _check(
            self.max_images <= LIMITS.images_per_request,
            "max_images",
            self.max_images,
            f"at most {LIMITS.images_per_request} (the images one prompt of the drafter's engine may hold)",
        )
        for name in (
            "request_timeout_s",
            "drain_timeout_s",
            "media_fetch_timeout_s",
            "header_timeout_s",
            "body_timeout_s",
        ):
            _check(
                _positive(getattr(self, name)),
                name,
                getattr(self, name),
                "a positive number of seconds",
            )
        _check(
            all(isinstance(d, str) and d.strip() for d in self.allowed_media_domains),
            "allowed_media_domains",
            self.allowed_media_domains,
            "host names (or '*')",
        )


def _positive(x) -> bool:
    return (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and x > 0
    )


def _check(ok: bool, name: str, value, allowed: str) -> None:
    if not ok:
        raise ConfigError(
            f"serve setting {name}={value!r} is invalid: expected {allowed}"
        )
