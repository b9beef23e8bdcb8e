"""The transformers backend: loads the drafter / verifier pair and runs every method through loop.py."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ...core import loop
from ...core.config import AsymSpecConfig
from ...core.logprobs import check_prompt_logprobs, prompt_logprobs
from ...core.methods import Method
from ...core.request_plan import RequestPlan
from ...core.structured import refuse_on_backend
from ...inputs import budget
from ...inputs.prompts import EncodedRequest, EncodedView
from ...pair.model_pair import ModelPair
from ...pair.models import context_length, load_causal_lm, resolve_device_dtype
from .source import HFSource

log = logging.getLogger(__name__)


class HFBackend:
    """Drafter (Qwen3-VL or a text LM), verifier (a text LM), optional text drafter for SD."""

    name = "hf"

    def __init__(self, pair: ModelPair, drafter, verifier, text_drafter=None):
        self.pair, self.drafter, self.verifier = pair, drafter, verifier
        # the models of methods.Source.model; SD's drafter is the VL drafter reading text unless one is given
        self.models = {
            "drafter": drafter,
            "verifier": verifier,
            "sd_drafter": text_drafter or drafter,
        }
        self.device = verifier.device

    @classmethod
    def load(
        cls,
        pair: ModelPair,
        drafter: str,
        verifier: str,
        text_drafter: str | None = None,
        device: str | None = None,
        dtype="auto",
        trust_remote_code: bool = False,
    ) -> HFBackend:
        dev, dt = resolve_device_dtype(device, dtype)
        d = load_causal_lm(drafter, dev, dt, trust_remote_code)
        v = load_causal_lm(verifier, dev, dt, trust_remote_code)
        td = (
            load_causal_lm(text_drafter, dev, dt, trust_remote_code)
            if text_drafter
            else None
        )
        pair.check_output_dims(d, v, td)
        return cls(pair, d, v, td)

    def plan_request(self, method: Method, cfg: AsymSpecConfig) -> RequestPlan:
        """One model set runs every method: no engine, no mode."""
        return RequestPlan(method, cfg)

    def context_length(self, model: str, plan: RequestPlan | None = None) -> int:
        return context_length(self.models[model])

    def close(self) -> None:
        """Nothing to release: the models go with the backend."""

    def run(
        self,
        reqs: list[EncodedRequest],
        plan: RequestPlan,
        on_step: Callable | None = None,
    ) -> list[loop.RowOutput]:
        """Decode the batch; each row carries the plan back. If that fails, each request is decoded alone: one
        that fails alone comes back marked (finish_reason "error", its exception as message) beside the others'
        results. A failure of every request (or of a batch of one) is not about a request: its exception
        propagates, as does any exception raised by on_step (the caller stopping the decoding)."""
        rows = self._run(reqs, plan.method, plan.cfg, on_step)
        for row in rows:
            row.plan = plan
        return rows

    def _run(
        self,
        reqs: list[EncodedRequest],
        method: Method,
        cfg: AsymSpecConfig,
        on_step: Callable | None,
    ) -> list[loop.RowOutput]:
        refuse_on_backend(cfg, self.name)
        check_prompt_logprobs(method.name, cfg)
        step = _CallerStep(on_step) if on_step else None
        try:
            return self._decode(reqs, method, cfg, step)
        except Exception as e:
            if len(reqs) == 1 or (step is not None and step.raised is e):
                raise
            log.warning(
                "a batch of %d requests failed (%s: %s); decoding them one by one",
                len(reqs),
                type(e).__name__,
                e,
            )
        return self._one_by_one(reqs, method, cfg, step)

    def _one_by_one(
        self,
        reqs: list[EncodedRequest],
        method: Method,
        cfg: AsymSpecConfig,
        step: _CallerStep | None,
    ) -> list[loop.RowOutput]:
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
                rows[i] = loop.RowOutput(
                    finish_reason="error", error=f"{type(e).__name__}: {e}"
                )
        if len(failures) == len(reqs):
            raise failures[0]
        return rows

    def _decode(
        self,
        reqs: list[EncodedRequest],
        method: Method,
        cfg: AsymSpecConfig,
        on_step: Callable | None,
    ) -> list[loop.RowOutput]:
        max_new = [
            min(cfg.max_new_tokens, budget.room(r, method, cfg, self.context_length))
            for r in reqs
        ]
        plan = loop.plan(
            method,
            cfg,
            lambda s: self._source(
                self.models[s.model], [r.view(s.view, s.model) for r in reqs]
            ),
            self.pair.banned_mask(self.device),
            self.pair.vmap,
        )
        rows = loop.run(
            plan, len(reqs), max_new, self.pair.stop_ids(cfg), on_step, self.pair.decode
        )
        if cfg.prompt_logprobs is not None:
            for r, row in zip(reqs, rows):
                row.prompt_logprobs = self._prompt_logprobs(
                    r.view("x_comp", "verifier").ids, cfg.prompt_logprobs
                )
        return rows

    @torch.no_grad()
    def _prompt_logprobs(self, prompt: list[int], k: int) -> list:
        """The verifier's logprobs of its prompt, one forward over it (vLLM computes them in its prefill)."""
        ids = torch.tensor([prompt], device=self.device)
        return prompt_logprobs(self.verifier(input_ids=ids).logits[0], prompt, k)

    def _source(self, model, views: list[EncodedView]) -> HFSource:
        """`model` reading one view per row, with a cache of its own (nothing runs until its prefill)."""
        images = {}
        if any(v.pixel_values is not None for v in views):
            images = {
                "pixel_values": torch.cat(
                    [v.pixel_values for v in views if v.pixel_values is not None]
                ).to(self.device, model.dtype),
                "image_grid_thw": torch.cat(
                    [v.image_grid_thw for v in views if v.image_grid_thw is not None]
                ).to(self.device),
                "row_image_grid_thw": [v.image_grid_thw for v in views],
            }
        return HFSource(model, [v.ids for v in views], self.pair.pad_id, images)


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
