"""The transformers backend: loads the drafter / verifier pair and runs every method through loop.py."""

from __future__ import annotations

import logging
from typing import Callable

import torch

from .. import loop
from .. import trace as T
from ..config import AsymSpecConfig
from ..errors import PromptTooLongError
from ..prompts import EncodedRequest, EncodedView
from ..vocab import ModelPair
from .hf_source import HFSource

log = logging.getLogger(__name__)


def resolve_device_dtype(device: str | None, dtype: str | torch.dtype) -> tuple[torch.device, torch.dtype]:
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype == "auto":
        return dev, torch.bfloat16 if dev.type == "cuda" else torch.float32
    return dev, getattr(torch, dtype) if isinstance(dtype, str) else dtype


def load_causal_lm(path: str, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False):
    """Qwen3-VL checkpoints load as Qwen3VLForConditionalGeneration, any other as AutoModelForCausalLM."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    auto = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    model = auto.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device).eval()


def context_length(model) -> int:
    cfg = getattr(model.config, "text_config", model.config)
    return int(cfg.max_position_embeddings)


class HFBackend:
    """Drafter (Qwen3-VL or a text LM), verifier (a text LM), optional text drafter for SD."""

    name = "hf"

    def __init__(self, pair: ModelPair, drafter, verifier, text_drafter=None):
        self.pair, self.drafter, self.verifier = pair, drafter, verifier
        self.text_drafter = text_drafter or drafter  # SD's drafter on x_comp; the VL drafter reads text too
        self.device = verifier.device

    @classmethod
    def load(cls, pair: ModelPair, drafter: str, verifier: str, text_drafter: str | None = None,
             device: str | None = None, dtype="auto", trust_remote_code: bool = False) -> "HFBackend":
        dev, dt = resolve_device_dtype(device, dtype)
        d = load_causal_lm(drafter, dev, dt, trust_remote_code)
        v = load_causal_lm(verifier, dev, dt, trust_remote_code)
        td = load_causal_lm(text_drafter, dev, dt, trust_remote_code) if text_drafter else None
        pair.check_output_dims(d, v, td)
        return cls(pair, d, v, td)

    def check_fits(self, r: EncodedRequest, method: str, cfg: AsymSpecConfig) -> None:
        """Refuse a prompt that leaves no room for one step in a model's context window."""
        for view, model, who in self._views(r, method):
            limit = context_length(model)
            if len(view.ids) + cfg.K + 2 > limit:
                raise PromptTooLongError(f"the {who} prompt has {len(view.ids)} tokens; the {who}'s context is "
                                         f"{limit} tokens (with K={cfg.K} look-ahead)")

    def room(self, r: EncodedRequest, method: str, cfg: AsymSpecConfig) -> int:
        """Tokens a request may generate before some model's context is full."""
        return min(context_length(m) - len(v.ids) - cfg.K - 1 for v, m, _ in self._views(r, method))

    def _views(self, r: EncodedRequest, method: str):
        if method == "drafter":
            return [(r.question, self.drafter, "drafter")]
        views = [(r.comp, self.verifier, "verifier")]
        if method == "asymspec":
            views += [(r.full, self.drafter, "drafter"), (r.comp, self.drafter, "drafter")]
        elif method in ("sd", "scd"):
            views += [(r.comp, self.text_drafter if method == "sd" else self.drafter, "drafter")]
        return views

    def run(self, reqs: list[EncodedRequest], method: str, cfg: AsymSpecConfig,
            on_step: Callable | None = None) -> list[loop.RowOutput]:
        """Decode the batch. If that fails, each request is decoded alone: one that fails alone comes back
        marked (finish_reason "error", its exception as message) beside the others' results. A failure
        of every request (or of a batch of one) is not about a request: its exception propagates, as does
        any exception raised by on_step (the caller stopping the decoding)."""
        for r in reqs:
            self.check_fits(r, method, cfg)
        step = _CallerStep(on_step) if on_step else None
        try:
            return self._decode(reqs, method, cfg, step)
        except Exception as e:
            if len(reqs) == 1 or (step is not None and step.raised is e):
                raise
            log.warning("a batch of %d requests failed (%s: %s); decoding them one by one", len(reqs),
                        type(e).__name__, e)
        return self._one_by_one(reqs, method, cfg, step)

    def _one_by_one(self, reqs: list[EncodedRequest], method: str, cfg: AsymSpecConfig,
                    step: "_CallerStep | None") -> list[loop.RowOutput]:
        rows = [loop.RowOutput() for _ in reqs]
        failures = []
        for i, r in enumerate(reqs):
            def one_step(one: list[loop.RowOutput], i: int = i) -> None:
                rows[i] = one[0]
                step(rows)
            try:
                rows[i] = self._decode([r], method, cfg, one_step if step else None)[0]
            except Exception as e:
                if step is not None and step.raised is e:
                    raise
                log.warning("request %d of the batch failed alone", i, exc_info=e)
                failures.append(e)
                rows[i] = loop.RowOutput(finish_reason="error", error=f"{type(e).__name__}: {e}")
        if len(failures) == len(reqs):
            raise failures[0]
        return rows

    def _decode(self, reqs: list[EncodedRequest], method: str, cfg: AsymSpecConfig,
                on_step: Callable | None) -> list[loop.RowOutput]:
        banned = self.pair.banned_mask(self.device)
        max_new = [min(cfg.max_new_tokens, self.room(r, method, cfg)) for r in reqs]
        verifier = lambda: self._source(self.verifier, [r.comp for r in reqs])  # noqa: E731
        if method == "floor":
            plan = loop.plan_greedy(verifier(), banned, T.VERIFIER)
        elif method == "drafter":
            plan = loop.plan_greedy(self._source(self.drafter, [r.question for r in reqs]), banned, T.DRAFTER)
        elif method == "sd":
            plan = loop.plan_sd(cfg, self._source(self.text_drafter, [r.comp for r in reqs]), verifier(), banned)
        elif method == "scd":
            plan = loop.plan_scd(cfg, self._source(self.drafter, [r.comp for r in reqs]), verifier(), banned)
        else:
            full = self._source(self.drafter, [r.full for r in reqs])
            comp = self._source(self.drafter, [r.comp for r in reqs])
            plan = loop.plan_asymspec(cfg, full, comp, verifier(), banned)
        return loop.run(plan, len(reqs), max_new, self.pair.stop_ids(cfg), banned, on_step)

    def _source(self, model, views: list[EncodedView]) -> HFSource:
        mm = {}
        if any(v.pixel_values is not None for v in views):
            mm = {"pixel_values": torch.cat([v.pixel_values for v in views if v.pixel_values is not None]
                                            ).to(self.device, model.dtype),
                  "image_grid_thw": torch.cat([v.image_grid_thw for v in views if v.image_grid_thw is not None]
                                              ).to(self.device),
                  "row_image_grid_thw": [v.image_grid_thw for v in views]}
        return HFSource(model, [v.ids for v in views], self.pair.pad_id, mm)


class _CallerStep:
    """on_step, remembering an exception it raised: the caller stopping the decoding, not a failed request."""

    def __init__(self, on_step: Callable):
        self.on_step, self.raised = on_step, None

    def __call__(self, rows: list[loop.RowOutput]) -> None:
        try:
            self.on_step(rows)
        except BaseException as e:
            self.raised = e
            raise
