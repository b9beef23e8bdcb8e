"""The vLLM backend: every method on vLLM 0.19 engines, AsymSpec through the patched speculative path.

  floor     the verifier alone on x_comp (plain engine, greedy, banned tokens masked)
  drafter   the VL drafter alone on x_question (plain engine; the image enters as embeddings from the
            engine's own vision tower)
  asymspec  the verifier on x_comp with speculative method "asymspec": the drafter reads x_full (image
            included) and x_comp, the project's gate decides (vllm_patches)
  sd, scd   the same engine type, drafts from the drafter (the text drafter for sd, if given) on x_comp
Engines start lazily and are kept in a bounded cache (vllm_engine.EngineCache: one at a time on a GPU);
one speculative engine per drafter serves every K up to its num_speculative_tokens, so changing K or β
starts nothing. Prompts, banned tokens, stop tokens, token budget (the HF backend's room rule, with the
engine's max_model_len as the context) and statistics match the transformers backend.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

from .. import loop
from .. import trace as T
from ..config import AsymSpecConfig
from ..errors import PromptTooLongError
from ..prompts import EncodedRequest
from ..vocab import ModelPair
from .vllm_engine import EngineCache, EngineSpec, build_engine, configure_environment, default_capacity, generate

FINISH = {"stop": "stop", "length": "length"}  # any other engine finish reason marks the request "error"


class VLLMBackend:
    name = "vllm"

    def __init__(self, pair: ModelPair, drafter: str, verifier: str, text_drafter: str | None, dtype,
                 tensor_parallel_size: int, engine_kwargs: dict, max_engines: int | None = None):
        self.pair, self.drafter, self.verifier, self.text_drafter = pair, drafter, verifier, text_drafter
        self.dtype, self.tp, self.engine_kwargs = dtype, tensor_parallel_size, engine_kwargs
        self.engines = EngineCache(lambda spec: build_engine(spec, self.dtype, self.tp, self.engine_kwargs),
                                   max_engines or default_capacity())

    @classmethod
    def load(cls, pair: ModelPair, drafter: str, verifier: str, text_drafter: str | None = None, dtype="auto",
             tensor_parallel_size: int = 1, max_engines: int | None = None, **engine_kwargs) -> "VLLMBackend":
        """engine_kwargs go to vllm.LLM; max_engines: engines kept at once (default: 1 on a GPU, 2 on CPU)."""
        configure_environment()
        return cls(pair, drafter, verifier, text_drafter, dtype, tensor_parallel_size, engine_kwargs, max_engines)

    def engine(self, spec: EngineSpec):
        return self.engines.get(spec)

    def close(self, spec: EngineSpec | None = None) -> None:
        """Shut down one cached engine (or all) and free its memory."""
        self.engines.close(spec)

    def engine_for(self, method: str, K: int) -> tuple[EngineSpec, str]:
        """The engine a method runs on, and the per-request mode for speculative engines. One speculative
        engine per drafter serves sd, scd and asymspec at every K up to its own."""
        if method == "floor":
            return EngineSpec(self.verifier), "plain"
        if method == "drafter":
            return EngineSpec(self.drafter, images=True), "plain"
        drafter = self.text_drafter if (method == "sd" and self.text_drafter) else self.drafter
        return EngineSpec(self.verifier, drafter, self.engines.speculative_K(self.verifier, drafter, K)), method

    def engine_order(self, methods: list[str]) -> list[str]:
        """`methods` grouped by the engine each runs on (first appearance order), so that a run that goes
        method by method starts each engine once."""
        keys = [(spec.model, spec.drafter, spec.images) for spec in (self.engine_for(m, 1)[0] for m in methods)]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        return [m for _, m in sorted(zip((first[k] for k in keys), methods), key=lambda x: x[0])]

    # -- the token budget ------------------------------------------------------------------------
    def max_model_len(self, spec: EngineSpec) -> int:
        return int(self.engine(spec).llm_engine.vllm_config.model_config.max_model_len)

    def room(self, r: EncodedRequest, method: str, cfg: AsymSpecConfig) -> int:
        """Tokens a request may generate before its longest view fills the engine's context."""
        spec, _ = self.engine_for(method, cfg.K)
        return self.max_model_len(spec) - max(len(v.ids) for v in _views(r, method)) - cfg.K - 1

    def check_fits(self, r: EncodedRequest, method: str, cfg: AsymSpecConfig) -> None:
        if self.room(r, method, cfg) < 1:
            spec, _ = self.engine_for(method, cfg.K)
            longest = max(len(v.ids) for v in _views(r, method))
            raise PromptTooLongError(f"a {longest}-token prompt does not fit the engine's context of "
                                     f"{self.max_model_len(spec)} tokens (with K={cfg.K})")

    # -- running ---------------------------------------------------------------------------------
    def run(self, reqs: list[EncodedRequest], method: str, cfg: AsymSpecConfig,
            on_step: Callable | None = None) -> list[loop.RowOutput]:
        """Decode the batch; a request the engine fails comes back marked (finish_reason "error", the
        engine's message), the others finish as usual."""
        spec, mode = self.engine_for(method, cfg.K)
        llm = self.engine(spec)
        for r in reqs:
            self.check_fits(r, method, cfg)
        prompts = [self._prompt(llm, r, method) for r in reqs]
        params = [self._params(r, method, mode, cfg) for r in reqs]
        rows = [loop.RowOutput(stats=T.Stats(accepted_at=[0] * (cfg.K if mode != "plain" else 0)))
                for _ in reqs]
        label = T.DRAFTER if method == "drafter" else T.VERIFIER
        start = time.perf_counter()
        progress = partial(self._progress, rows, _StreamedStats(mode, cfg.K, len(reqs)), label, on_step)
        finals = generate(llm, prompts, params, progress if on_step else None)
        elapsed = time.perf_counter() - start
        return [self._row(o, mode, label, elapsed) for o in finals]

    def _prompt(self, llm, r: EncodedRequest, method: str) -> dict:
        if method != "drafter":
            return {"prompt_token_ids": list(r.comp.ids)}
        prompt = {"prompt_token_ids": list(r.question.ids)}
        if r.question.pixel_values is not None:
            # vLLM's processor expands each image's single placeholder token itself
            prompt["prompt_token_ids"] = _collapse_runs(r.question.ids, self.pair.tokenizer.convert_tokens_to_ids(
                "<|image_pad|>"))
            from vllm_patches.request_args import pack_tensor, unpack_tensor

            packed = llm.collective_rpc("asymspec_image_embeddings", args=(pack_tensor(r.question.pixel_values),
                                                                            pack_tensor(r.question.image_grid_thw)))[0]
            embeds = unpack_tensor(packed, "image embeddings")
            prompt["multi_modal_data"] = {"image": {"image_embeds": embeds, "image_grid_thw": r.question.image_grid_thw}}
        return prompt

    def _params(self, r: EncodedRequest, method: str, mode: str, cfg: AsymSpecConfig):
        from vllm import SamplingParams

        import vllm_patches

        banned = self.pair.banned_ids()
        kw = dict(temperature=0.0, max_tokens=min(cfg.max_new_tokens, self.room(r, method, cfg)),
                  ignore_eos=True, stop_token_ids=sorted(self.pair.stop_ids(cfg)), detokenize=False)
        if mode == "plain":
            return SamplingParams(**kw, logit_bias={i: float("-inf") for i in banned})
        x_full = r.full if mode == "asymspec" else None
        extra = vllm_patches.make_extra_args(
            mode, cfg, x_full=x_full.ids if x_full else None,
            pixel_values=x_full.pixel_values if x_full else None,
            image_grid_thw=x_full.image_grid_thw if x_full else None, banned=banned)
        return SamplingParams(**kw, extra_args=extra)

    @staticmethod
    def _progress(rows, streamed: "_StreamedStats", label, on_step, step_outputs: dict) -> None:
        for i, o in step_outputs.items():
            toks = list(o.outputs[0].token_ids)
            if streamed.mode == "plain":
                rows[i].sources += [label] * (len(toks) - len(rows[i].token_ids))
            else:
                rows[i].sources, rows[i].stats = streamed.step(i, len(toks) - len(rows[i].token_ids))
            rows[i].token_ids = toks
        on_step(rows)

    @staticmethod
    def _row(o, mode: str, label: str, elapsed: float) -> loop.RowOutput:
        from vllm_patches.stats import from_output

        comp = o.outputs[0]
        tokens = list(comp.token_ids)
        stats, sources, error = from_output(o.kv_transfer_params)
        if mode == "plain":
            stats = T.Stats(steps=len(tokens), emitted=len(tokens))
            sources = [label] * len(tokens)
        stats.elapsed_s = elapsed
        if comp.finish_reason in FINISH:
            return loop.RowOutput(tokens, sources, stats, FINISH[comp.finish_reason])
        return loop.RowOutput(tokens, sources, stats, "error", f"the engine finished the request with "
                                                              f"'{comp.finish_reason}': {error or 'no detail'}")


class _StreamedStats:
    """Labels and counters while a speculative request streams: each engine step's new tokens are the
    accepted drafts and then the token the step emitted, counted by the engine's own rule
    (vllm_patches.stats). Provisional only where the engine drafted fewer than K (near the context limit)
    or a stop token cut the step; the finished output carries the engine's exact figures."""

    def __init__(self, mode: str, K: int, n: int):
        from vllm_patches.stats import EngineStats

        self.mode, self.K = mode, K
        self.rows = [EngineStats(K, mode) for _ in range(n)] if mode != "plain" else []

    def step(self, i: int, num_new: int) -> tuple[list[str], T.Stats]:
        s = self.rows[i]
        while num_new > 0:  # one step commits at most K + 1 (more: outputs of several steps arrived at once)
            n = min(num_new, self.K + 1)
            s.record(self.K, n, n)
            num_new -= n
        return list(s.sources), T.Stats(steps=s.steps, drafted=s.drafted, accepted=s.accepted, emitted=s.emitted,
                                        accepted_at=list(s.accepted_at))


def _views(r: EncodedRequest, method: str):
    if method == "drafter":
        return [r.question]
    return [r.comp, r.full] if method == "asymspec" else [r.comp]


def _collapse_runs(ids: list[int], token: int) -> list[int]:
    """Each run of `token` -> one `token` (the unexpanded image placeholder)."""
    return [t for i, t in enumerate(ids) if t != token or i == 0 or ids[i - 1] != token]
