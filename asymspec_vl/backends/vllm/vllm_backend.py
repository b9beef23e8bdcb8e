"""The vLLM backend: every method on vLLM 0.19 engines, AsymSpec through the patched speculative path.

  floor     the verifier alone on x_comp (plain engine, banned tokens masked; vLLM's sampler samples; across
            a map on the speculative engine, mode "floor")
  drafter   the VL drafter alone on x_question (plain engine; the image enters as the transformers
            processor's pixel_values, which the engine's own vision tower embeds on the worker:
            vllm_patches/hooks/pixel_inputs.py)
Stop strings go to SamplingParams.stop (vLLM's output processor cuts them) on every engine; sampling
(temperature, top_p, top_k, min_p, seed) and min_tokens to SamplingParams too: vLLM's sampler reads them on the
plain engines, the speculative engine's sampler runs each method's sampled rule on them (vllm_patches/sampler.py:
the rules of asymspec_vl.core.sampling, the transformers backend's; a seed gives the same generator stream).
  asymspec  the verifier on x_comp with speculative method "asymspec": the drafter reads x_full (image
            included) and x_comp, the project's gate decides (vllm_patches)
  sd, scd   the same engine type, drafts from the drafter (the text drafter for sd, if given) on x_comp
Engines start lazily and are kept in a bounded cache (vllm_engine.EngineCache: one at a time on a GPU);
one speculative engine per drafter serves every K up to its num_speculative_tokens, so changing K or β
starts nothing. A request's engine and mode are looked up once, in plan_request (a core.request_plan.RequestPlan);
run, engine_request and row read them from the plan, and each row carries it back. Prompts, banned tokens, stop
tokens, token budget (the HF backend's room rule, with the engine's max_model_len as the context) and statistics
match the transformers backend.
A cross-family pair (two vocabularies, pair.vmap) runs greedy and sampled on the same engines: the speculative
engine's requests carry the drafter's x_comp in its own ids (x_comp_drafter; the workers cross the map,
docs/cross-family.md), Floor runs there too (mode "floor"), the drafter's plain engine bans the tokens outside the
shared set (so vLLM's own sampler draws core/vocab_sampling.py's token) and its answer, logprobs included
(requests/logprob_support.py), comes back in the verifier's ids (drafter_answer.py); a structured output's dead end
fails its request alone on either engine (vllm_patches/grammar_dead_end.py, requests/plain_dead_ends.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from functools import cached_property, partial

import vllm_patches
from vllm_patches.requests.logprob_support import SUPPORT_KEY
from vllm_patches.requests.request_args import sampling_params
from vllm_patches.requests.stats import EngineStats, from_output

from ...core import loop
from ...core import trace as T
from ...core.config import AsymSpecConfig
from ...core.logprobs import check_prompt_logprobs
from ...core.methods import Method
from ...core.methods import method as method_named
from ...core.min_tokens import MinTokens
from ...core.parallelism import refuse_pipeline_parallelism
from ...core.request_plan import RequestPlan
from ...inputs import budget
from ...inputs.prompts import EncodedRequest
from ...pair.model_pair import ModelPair
from . import drafter_answer
from .engine import (
    EngineCache,
    EngineSpec,
    build_engine,
    configure_environment,
    default_capacity,
    generate,
)
from .grammar import check_compiles
from .sample_logprobs import MissingLogprobsError, from_vllm, prompt_from_vllm

FINISH_REASONS = (
    "stop",
    "length",
)  # any other engine finish reason marks the request "error"


class VLLMBackend:
    name = "vllm"

    def __init__(
        self,
        pair: ModelPair,
        drafter: str,
        verifier: str,
        text_drafter: str | None,
        dtype,
        tensor_parallel_size: int,
        engine_kwargs: dict,
        max_engines: int | None = None,
        drafter_share: float | None = None,
        loop=None,
    ):
        """drafter_share, loop: build_engine's (a server's AsyncLLM engines, the drafter-alone one's GPU share)."""
        refuse_pipeline_parallelism(
            engine_kwargs.get("pipeline_parallel_size"), "pipeline_parallel_size"
        )
        self.pair, self.drafter, self.verifier, self.text_drafter = (
            pair,
            drafter,
            verifier,
            text_drafter,
        )
        self.dtype, self.tp, self.engine_kwargs = (
            dtype,
            tensor_parallel_size,
            engine_kwargs,
        )
        self.engines = EngineCache(
            lambda spec: build_engine(
                spec, self.dtype, self.tp, self.engine_kwargs, drafter_share, loop
            ),
            max_engines or default_capacity(),
        )

    @classmethod
    def load(
        cls,
        pair: ModelPair,
        drafter: str,
        verifier: str,
        text_drafter: str | None = None,
        dtype="auto",
        tensor_parallel_size: int = 1,
        max_engines: int | None = None,
        **engine_kwargs,
    ) -> VLLMBackend:
        """engine_kwargs go to vllm.LLM; max_engines: engines kept at once (default: 1 on a GPU, 2 on CPU)."""
        configure_environment()
        return cls(
            pair,
            drafter,
            verifier,
            text_drafter,
            dtype,
            tensor_parallel_size,
            engine_kwargs,
            max_engines,
        )

    def engine(self, spec: EngineSpec):
        return self.engines.get(spec)

    def start_engines(self, specs: list[EngineSpec]) -> list:
        """Start these engines now and no others (a server's fixed set: a request needing another raises
        ConfigError); if one fails to start, those started are shut down."""
        return self.engines.start_fixed(specs)

    def close(self, spec: EngineSpec | None = None) -> None:
        """Shut down one cached engine (or all) and free its memory."""
        self.engines.close(spec)

    def engine_for(
        self, method: Method | str, K: int, speculative: bool = False
    ) -> tuple[EngineSpec, str]:
        """The engine a method runs on (methods.py's `engine`), and the per-request mode on a speculative
        engine ("plain" elsewhere). One speculative engine per drafter serves sd, scd and asymspec at every K
        up to its own; with `speculative` Floor runs there too, in mode "floor" (no drafts: the verifier's
        greedy tokens on x_comp), as on a server, and so it does for a cross-family pair: its draws are
        core/vocab_sampling.py's (the drafter's columns), which a plain verifier engine's sampler cannot draw, and
        its logprobs are restricted to the shared set (docs/cross-family.md, "vLLM engine")."""
        method = method if isinstance(method, Method) else method_named(method)
        if method.engine == "verifier" and not (
            speculative or not self.pair.vmap.identity
        ):
            return EngineSpec(self.verifier), "plain"
        if method.engine == "drafter":
            return EngineSpec(self.drafter, images=True), "plain"
        drafting = method.drafting.model if method.drafting else None
        drafter = (
            self.text_drafter
            if (drafting == "sd_drafter" and self.text_drafter)
            else self.drafter
        )
        return EngineSpec(
            self.verifier,
            drafter,
            self.engines.speculative_K(self.verifier, drafter, K),
        ), method.name

    def plan_request(
        self, method: Method | str, cfg: AsymSpecConfig, speculative: bool = False
    ) -> RequestPlan:
        """The request's plan: its engine and mode looked up once (engine_for; `speculative`: as a server holds its
        engines, see engine_for). Everything after reads them from the plan."""
        method = method if isinstance(method, Method) else method_named(method)
        spec, mode = self.engine_for(method, cfg.K, speculative)
        return RequestPlan(method, cfg, spec, mode)

    def context_length(self, model: str, plan: RequestPlan) -> int:
        """Every view of a request runs in its plan's engine: that engine's max_model_len."""
        return max_model_len(self.engine(plan.engine))

    # -- running ---------------------------------------------------------------------------------
    def run(
        self,
        reqs: list[EncodedRequest],
        plan: RequestPlan,
        on_step: Callable | None = None,
    ) -> list[loop.RowOutput]:
        """Decode the batch on the plan's engine; a request the engine fails comes back marked (finish_reason
        "error", the engine's message), the others finish as usual; each row carries the plan back."""
        llm = self.engine(plan.engine)
        prompts, params = zip(*(self.engine_request(r, plan) for r in reqs))
        rows = [
            loop.RowOutput(
                stats=T.Stats(accepted_at=[0] * (plan.K if plan.mode != "plain" else 0))
            )
            for _ in reqs
        ]
        start = time.perf_counter()
        to_verifier = self._to_verifier_ids(plan.method)
        progress = partial(
            self._progress,
            rows,
            StreamedStats(plan.method, plan.mode, plan.K, len(reqs)),
            on_step,
            to_verifier,
        )
        finals = generate(llm, prompts, params, progress if on_step else None)
        elapsed = time.perf_counter() - start
        return [self.row(o, plan, elapsed, self.pair.vmap) for o in finals]

    def _to_verifier_ids(self, method: Method) -> Callable[[list[int]], list[int]]:
        """The engine's output ids -> the verifier's: the drafter alone of a cross-family pair answers in the
        drafter's ids (drafter_answer.py), one gather; otherwise as they are."""
        vmap = self.pair.vmap
        if not drafter_answer.speaks_drafter_ids(method, vmap):
            return list
        return partial(drafter_answer.tokens, vmap)

    def engine_request(
        self, r: EncodedRequest, plan: RequestPlan
    ) -> tuple[dict, object]:
        """What the plan's engine receives for one request: its prompt and SamplingParams. Every view of the
        request runs in that engine, so its max_model_len is each source's context."""
        check_prompt_logprobs(plan.method.name, plan.cfg)
        llm = self.engine(plan.engine)
        length = max_model_len(llm)
        room = budget.room(r, plan.method, plan.cfg, lambda model: length)
        return self._prompt(r, plan.method), self._params(r, plan, room)

    def _prompt(self, r: EncodedRequest, method: Method) -> dict:
        """The engine's prompt: the view the engine's own model reads (x_comp on the verifier's engines, x_question
        on the drafter's, its image as the processor's pixels, embedded inside that engine)."""
        view = r.view(
            method.scoring[0].view if method.engine == "drafter" else "x_comp"
        )
        prompt = {"prompt_token_ids": list(view.ids)}
        if view.pixel_values is not None:
            # vLLM's processor expands each image's single placeholder token itself
            prompt["prompt_token_ids"] = _collapse_runs(
                view.ids,
                self._drafter_tokenizer().convert_tokens_to_ids("<|image_pad|>"),
            )
            prompt["multi_modal_data"] = {
                "image": {
                    "pixel_values": view.pixel_values,
                    "image_grid_thw": view.image_grid_thw,
                }
            }
        return prompt

    def _drafter_tokenizer(self):
        """The drafter's tokenizer (the views it reads are in its ids; one with the verifier's in a same-family
        pair)."""
        return getattr(self.pair.processor, "tokenizer", self.pair.processor)

    def _params(self, r: EncodedRequest, plan: RequestPlan, room: int):
        from vllm import SamplingParams  # lazy: loads vLLM

        method, cfg = plan.method, plan.cfg
        banned = self.pair.banned_ids()
        stop_ids = self.pair.stop_ids(cfg)
        vmap = self.pair.vmap
        if plan.mode == "plain" and not vmap.identity:
            # the drafter alone across a map (Floor runs on the speculative engine there): its stop tokens in its ids
            # (the rule of vocab_align.decide_drafter and MinTokens.mapped)
            stop_ids = MinTokens(0, stop_ids, []).mapped(vmap).stop_ids
        kw = dict(
            max_tokens=min(cfg.max_new_tokens, room),
            ignore_eos=True,
            stop_token_ids=sorted(stop_ids),
            detokenize=bool(cfg.stop),
            **sampling_params(cfg),
        )
        if (
            cfg.structured_output is not None
        ):  # vLLM's scheduler masks t (every method) and validates the drafts
            check_compiles(
                cfg.structured_output
            )  # a constraint the engine cannot compile must not reach it
            kw["structured_outputs"] = cfg.structured_output.sampling_params()
        if (
            plan.mode == "plain"
        ):  # vLLM's own sampler: temperature, top_p, top_k, min_p, seed, min_tokens
            if vmap.identity:
                return SamplingParams(
                    **kw, logit_bias={i: float("-inf") for i in banned}
                )
            # the drafter alone across a map writes its shared tokens only: vLLM's own sampler then draws
            # vocab_sampling's token (the same [B, Vd] columns, the others at probability 0). allowed_token_ids: one
            # bool row of vLLM's mask, filled when the request joins the batch (drafter_answer.drafter_alone_ids);
            # the pair's lists go by reference (skip_clone: these params are this request's alone, and vLLM's
            # deep copy would copy them per request)
            ids = self._drafter_alone_ids
            if cfg.logprobs is not None:
                # its logprobs over the shared set (requests/logprob_support.py): the ids outside it
                kw["extra_args"] = {SUPPORT_KEY: ids.outside}
            return SamplingParams(**kw, allowed_token_ids=ids.allowed, skip_clone=True)
        # sampling and min_tokens travel in kw: the engine's sampler runs the method's sampled rule on them
        full = r.full if method.drafting and method.drafting.view == "x_full" else None
        # a cross-family pair's drafter reads x_comp in its own ids and template (its own KV view on the engine)
        own_comp = (
            r.drafter_comp
            if r.drafter_comp is not None
            and ("b" in method.reads or method.draft_view == "x_comp")
            else None
        )
        extra = vllm_patches.make_extra_args(
            plan.mode,
            cfg,
            x_full=full.ids if full else None,
            pixel_values=full.pixel_values if full else None,
            image_grid_thw=full.image_grid_thw if full else None,
            banned=banned,
            x_comp_drafter=own_comp.ids if own_comp else None,
        )
        return SamplingParams(**kw, extra_args=extra)

    @cached_property
    def _drafter_alone_ids(self) -> drafter_answer.DrafterAloneIds:
        """What the drafter alone's requests of a cross-family pair name, made once per pair."""
        return drafter_answer.drafter_alone_ids(self.pair.vmap, self.pair.banned_ids())

    @staticmethod
    def _progress(
        rows, streamed: StreamedStats, on_step, to_verifier, step_outputs: dict
    ) -> None:
        for i, o in step_outputs.items():
            tokens = to_verifier(list(o.outputs[0].token_ids))
            rows[i].sources, rows[i].stats = streamed.step(
                i, len(tokens) - len(rows[i].token_ids)
            )
            rows[i].token_ids, rows[i].done = tokens, o.finished
        on_step(rows)

    @staticmethod
    def row(o, plan: RequestPlan, elapsed: float, vmap=None) -> loop.RowOutput:
        """A finished RequestOutput as the plan's row (tokens, sources, statistics, finish reason; with
        cfg.logprobs the engine's logprobs, each named by its distribution), the plan carried back on it; in the
        verifier's ids (vmap: the pair's map, which the drafter alone's answer crosses: drafter_answer.py)."""
        method, mode, cfg = plan.method, plan.mode, plan.cfg
        completion = o.outputs[0]
        tokens = list(completion.token_ids)
        if vmap is not None and drafter_answer.speaks_drafter_ids(method, vmap):
            row = VLLMBackend.row(o, plan, elapsed)
            row.token_ids = drafter_answer.tokens(vmap, row.token_ids)
            row.logprobs = drafter_answer.logprobs(vmap, row.logprobs)
            return row
        stats, sources, error = from_output(o.kv_transfer_params)
        if mode == "plain":
            stats = T.Stats(steps=len(tokens), emitted=len(tokens))
            sources = [method.labels.all_passed] * len(tokens)
        stats.elapsed_s = elapsed
        if completion.finish_reason in FINISH_REASONS:
            text = (
                completion.text if isinstance(completion.stop_reason, str) else None
            )  # cut by a stop string
            try:
                logprobs = (
                    from_vllm(completion.logprobs, tokens, sources, method.name, cfg)
                    if cfg.logprobs is not None
                    else None
                )
                prompt_lps = (
                    prompt_from_vllm(
                        o.prompt_logprobs, o.prompt_token_ids, cfg.prompt_logprobs
                    )
                    if cfg.prompt_logprobs is not None
                    else None
                )
            except MissingLogprobsError as e:
                return loop.RowOutput(
                    tokens, sources, stats, "error", str(e), plan=plan
                )
            return loop.RowOutput(
                tokens,
                sources,
                stats,
                completion.finish_reason,
                text=text,
                logprobs=logprobs,
                prompt_logprobs=prompt_lps,
                plan=plan,
            )
        return loop.RowOutput(
            tokens,
            sources,
            stats,
            "error",
            f"the engine finished the request with "
            f"'{completion.finish_reason}': {error or 'no detail'}",
            plan=plan,
        )


class StreamedStats:
    """Labels and counters while a request streams. On a speculative engine each step's new tokens are the
    accepted drafts and then the token the step emitted, counted by the engine's own rule
    (vllm_patches.requests.stats); provisional only where the engine drafted fewer than K (near the context limit) or a
    stop token cut the step: the finished output carries the engine's exact figures. Elsewhere each token is
    one step of the method's greedy decoding."""

    def __init__(self, method: Method, mode: str, K: int, n: int):

        self.method, self.mode, self.K = method, mode, K
        self.rows = [EngineStats(K, mode) for _ in range(n)] if mode != "plain" else []
        self.plain = [loop.RowOutput() for _ in range(n)] if mode == "plain" else []

    def step(self, i: int, num_new: int) -> tuple[list[str], T.Stats]:
        if self.mode == "plain":
            row = self.plain[i]
            for _ in range(num_new):
                row.sources.append(self.method.labels.all_passed)
                row.stats.record(0, 0, 1)
            return list(row.sources), copy.deepcopy(row.stats)
        s = self.rows[i]
        K = len(
            s.stats.accepted_at
        )  # 0 for a mode without drafts (Floor on the speculative engine)
        while (
            num_new > 0
        ):  # one step commits at most K + 1 (more: outputs of several steps arrived at once)
            n = min(num_new, K + 1)
            s.record(K, n, n)
            num_new -= n
        return list(s.sources), copy.deepcopy(s.stats)


def _collapse_runs(ids: list[int], token: int) -> list[int]:
    """Each run of `token` -> one `token` (the unexpanded image placeholder)."""
    return [t for i, t in enumerate(ids) if t != token or i == 0 or ids[i - 1] != token]


def max_model_len(llm) -> int:
    """The context of an engine (vLLM's LLM): every view of a request on it has this many positions."""
    return int(llm.llm_engine.vllm_config.model_config.max_model_len)
