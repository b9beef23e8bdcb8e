"""Public API: AsymSpecVL.from_pretrained(drafter=..., verifier=...).generate(image, question, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .config import AsymSpecConfig, check_method
from .loop import RowOutput
from .prompts import Prompts, Request, encode_request
from .trace import Stats
from .vocab import ModelPair

DEFAULT_DRAFTER = "Qwen/Qwen3-VL-2B-Instruct"
DEFAULT_VERIFIER = "Qwen/Qwen3-32B"
BACKENDS = ("hf", "vllm")


@dataclass
class TraceToken:
    token_id: int
    text: str
    source: str  # trace.TOKEN_SOURCES: draft | fused | bonus | verifier | drafter | contrastive


@dataclass
class GenerationResult:
    """The answer and how it was made."""

    text: str
    token_ids: list[int]
    trace: list[TraceToken]
    stats: Stats
    prompts: Prompts
    method: str
    config: AsymSpecConfig
    finish_reason: str
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids, "method": self.method,
                "finish_reason": self.finish_reason, "stats": self.stats.to_dict(),
                "trace": [t.__dict__ for t in self.trace], "prompts": self.prompts.__dict__,
                "config": self.config.to_dict(), **self.meta}


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token adds. A character split over several byte-level tokens is shown on the token
    that completes it (the earlier ones add ""), so the pieces join to the decoded text."""
    pieces, held = [], []
    for i in ids:
        held.append(i)
        text = tokenizer.decode(held)
        if text.endswith("\ufffd") and len(held) < 4:  # an incomplete UTF-8 sequence: wait for its end
            pieces.append("")
            continue
        pieces.append(text)
        held = []
    return pieces


class AsymSpecVL:
    """A vision-language drafter reading the image steers a text-only verifier reading caption + OCR."""

    def __init__(self, pair: ModelPair, backend, names: dict):
        self.pair, self.backend, self.names = pair, backend, names

    @classmethod
    def from_pretrained(cls, drafter: str = DEFAULT_DRAFTER, verifier: str = DEFAULT_VERIFIER,
                        backend: str = "hf", text_drafter: str | None = None, device: str | None = None,
                        dtype="auto", trust_remote_code: bool = False, **backend_kwargs) -> "AsymSpecVL":
        """Load by hub id or local path ("embedded": the offline default pair).
        backend: "hf" (transformers) or "vllm" (the patched vLLM 0.19 path)."""
        from .defaults import resolve
        from .errors import ConfigError

        drafter, verifier = resolve("drafter", drafter), resolve("verifier", verifier)
        text_drafter = resolve("text_drafter", text_drafter)
        if backend not in BACKENDS:
            raise ConfigError(f"backend={backend!r} is invalid: expected one of {BACKENDS}")
        pair = ModelPair.load(drafter, verifier, text_drafter, trust_remote_code)
        if backend == "hf":
            from .backends.hf import HFBackend

            impl = HFBackend.load(pair, drafter, verifier, text_drafter, device, dtype, trust_remote_code)
        else:
            from .backends.vllm import VLLMBackend

            impl = VLLMBackend.load(pair, drafter, verifier, text_drafter, dtype=dtype, **backend_kwargs)
        names = {"drafter": drafter, "verifier": verifier, "text_drafter": text_drafter, "backend": backend}
        return cls(pair, impl, names)

    def generate(self, image=None, question: str = "", caption: str = "", ocr: str = "",
                 method: str = "asymspec", config: AsymSpecConfig | None = None,
                 full_context: str | None = None, compressed_context: str | None = None,
                 on_step: Callable | None = None) -> GenerationResult:
        """Answer one question. With an image: the drafter reads image + text, the verifier caption + OCR.
        Text-only AsymSpec: pass full_context (drafter) and compressed_context (verifier) instead."""
        req = Request(question, image, caption, ocr, full_context, compressed_context)
        return self.generate_batch([req], method, config, on_step)[0]

    def generate_batch(self, requests: list[Request], method: str = "asymspec",
                       config: AsymSpecConfig | None = None, on_step: Callable | None = None
                       ) -> list[GenerationResult]:
        """Decode many requests together (different prompt lengths are fine). Every request is
        validated before any model runs; a bad one raises its typed error and nothing is lost."""
        cfg = config or AsymSpecConfig()
        check_method(method)
        encoded = [encode_request(r, self.pair.processor, self.pair.tokenizer) for r in requests]
        outputs = self.backend.run(encoded, method, cfg, on_step=on_step)
        return [self._result(e, o, method, cfg) for e, o in zip(encoded, outputs)]

    def decode(self, token_ids: list[int]) -> str:
        return self.pair.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _result(self, enc, out: RowOutput, method: str, cfg: AsymSpecConfig) -> GenerationResult:
        pieces = token_pieces(self.pair.tokenizer, out.token_ids)
        trace = [TraceToken(i, p, s) for i, p, s in zip(out.token_ids, pieces, out.sources)]
        return GenerationResult(self.decode(out.token_ids), out.token_ids, trace, out.stats, enc.prompts,
                                method, cfg, out.finish_reason, dict(enc.meta))
