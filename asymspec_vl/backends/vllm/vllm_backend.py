"""The vLLM backend: every method on vLLM 0.19 engines, AsymSpec through the patched speculative path.

  floor     the verifier alone on x_comp (plain engine, banned tokens masked; vLLM's sampler samples)
  drafter   the VL drafter alone on x_question (plain engine; the image enters as embeddings from the
            engine's own vision tower)
Stop strings go to SamplingParams.stop (vLLM's output processor cuts them) on every engine; sampling
(temperature, top_p, top_k, min_p, seed) and min_tokens to SamplingParams too: vLLM's sampler reads them on the
plain engines, the speculative engine's sampler runs each method's sampled rule on them (vllm_patches/sampler.py:
the rules of asymspec_vl.core.sampling, the transformers backend's; a seed gives the same generator stream).
  asymspec  the verifier on x_comp with speculative method "asymspec": the drafter reads x_full (image
            included) and x_comp, the project's gate decides (vllm_patches)
  sd, scd   the same engine type, drafts from the drafter (the text drafter for sd, if given) on x_comp
Engines start lazily and are kept in a bounded cache (vllm_engine.EngineCache: one at a time on a GPU);
one speculative engine per drafter serves every K up to its num_speculative_tokens, so changing K or β
starts nothing. Prompts, banned tokens, stop tokens, token budget (the HF backend's room rule, with the
engine's max_model_len as the context) and statistics match the transformers backend.
A cross-family pair (two vocabularies, pair.vmap) runs greedily on the same engines: the speculative engine's
requests carry the drafter's x_comp in its own ids (x_comp_drafter; the workers cross the map, docs/cross-family.md),
Floor's and the drafter's plain engines ban the tokens outside the shared set, the drafter's answer comes back in
the verifier's ids.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from functools import partial

import torch

import vllm_patches
from vllm_patches.requests.request_args import (
    pack_tensor,
    sampling_params,
    unpack_tensor,
)
from vllm_patches.requests.stats import EngineStats, from_output

from ...core import loop
from ...core import trace as T
from ...core.config import AsymSpecConfig
from ...core.errors import ConfigError, ModelPairError
from ...core.logprobs import check_prompt_logprobs
from ...core.methods import Method
from ...core.methods import method as method_named
from ...core.min_tokens import MinTokens
from ...inputs import budget
from ...inputs.prompts import EncodedRequest
from ...inputs.vocab import token_mask
from ...pair.model_pair import ModelPair
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
        greedy tokens on x_comp), as on a server."""
        method = method if isinstance(method, Method) else method_named(method)
        if method.engine == "verifier" and not speculative:
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

    def context_length(
        self, model: str, method: Method, cfg: AsymSpecConfig, speculative: bool = False
    ) -> int:
        """Every view of a request runs in one engine: its max_model_len."""
        spec, _ = self.engine_for(method, cfg.K, speculative)
        return max_model_len(self.engine(spec))

    # -- running ---------------------------------------------------------------------------------
    def run(
        self,
        reqs: list[EncodedRequest],
        method: Method,
        cfg: AsymSpecConfig,
        on_step: Callable | None = None,
    ) -> list[loop.RowOutput]:
        """Decode the batch; a request the engine fails comes back marked (finish_reason "error", the
        engine's message), the others finish as usual."""
        spec, mode = self.engine_for(method, cfg.K)
        llm = self.engine(spec)
        prompts, params = zip(*(self.engine_request(r, method, cfg) for r in reqs))
        rows = [
            loop.RowOutput(
                stats=T.Stats(accepted_at=[0] * (cfg.K if mode != "plain" else 0))
            )
            for _ in reqs
        ]
        start = time.perf_counter()
        to_verifier = self._to_verifier_ids(method)
        progress = partial(
            self._progress,
            rows,
            StreamedStats(method, mode, cfg.K, len(reqs)),
            on_step,
            to_verifier,
        )
        finals = generate(llm, prompts, params, progress if on_step else None)
        elapsed = time.perf_counter() - start
        rows = [self.row(o, method, mode, elapsed, cfg) for o in finals]
        for row in rows:
            row.token_ids = to_verifier(row.token_ids)
        return rows

    def _to_verifier_ids(self, method: Method) -> Callable[[list[int]], list[int]]:
        """The engine's output ids -> the verifier's: the drafter alone of a cross-family pair answers in the
        drafter's ids (every one shared: its logit_bias bans the others), one gather; otherwise as they are."""
        vmap = self.pair.vmap
        if method.engine != "drafter" or vmap.identity:
            return list
        return lambda ids: vmap.to_verifier_ids(
            torch.tensor(ids, dtype=torch.long)
        ).tolist()

    def engine_request(
        self,
        r: EncodedRequest,
        method: Method | str,
        cfg: AsymSpecConfig,
        speculative: bool = False,
    ) -> tuple[dict, object]:
        """What the method's engine receives for one request: its prompt and SamplingParams (`speculative`: see
        engine_for)."""
        prompt, params, _ = self._request(r, method, cfg, speculative)
        return prompt, params

    def served_request(
        self, r: EncodedRequest, method: Method, cfg: AsymSpecConfig
    ) -> tuple[dict, object, str]:
        """(prompt, SamplingParams, mode) of a request on the engines a server holds: the speculative engine runs
        every method but the drafter alone, Floor in mode "floor" (it reads what SD reads, x_comp, with the same
        budget)."""
        return self._request(r, method, cfg, speculative=True)

    def _request(
        self,
        r: EncodedRequest,
        method: Method | str,
        cfg: AsymSpecConfig,
        speculative: bool,
    ) -> tuple[dict, object, str]:
        """(prompt, SamplingParams, mode), the engine looked up once: every view of the request runs in it, so its
        max_model_len is each source's context."""
        method = method if isinstance(method, Method) else method_named(method)
        check_prompt_logprobs(method.name, cfg)
        if not self.pair.vmap.identity:
            self._refuse_across_map(r, method, cfg, speculative)
        spec, mode = self.engine_for(method, cfg.K, speculative)
        llm = self.engine(spec)
        length = max_model_len(llm)
        room = budget.room(r, method, cfg, lambda model: length)
        return (
            self._prompt(llm, r, method),
            self._params(r, method, mode, cfg, room),
            mode,
        )

    def _refuse_across_map(
        self, r: EncodedRequest, method: Method, cfg: AsymSpecConfig, speculative: bool
    ) -> None:
        """A typed error for what the vLLM engine does not run across a vocabulary map yet (docs/cross-family.md,
        'vLLM engine'): sampling, structured output; for the drafter alone (its plain engine speaks the drafter's
        ids, moved to the verifier's by `run`) a server's request and logprobs."""
        loop.refuse_across_map(cfg)
        if cfg.structured_output is not None:
            raise ConfigError(
                "structured_output is not run for a cross-family pair on the vLLM engine yet: a grammar may "
                "allow no token of the shared set (docs/cross-family.md)"
            )
        if method.engine == "drafter" and (speculative or cfg.logprobs is not None):
            raise ModelPairError(
                f"method {method.name!r} on the vLLM engine for a cross-family pair: its plain drafter engine "
                "speaks the drafter's ids; a server's request and logprobs are not ported there yet "
                "(backend='hf' runs them)"
            )

    def served_engine(self, method: Method, K: int):
        """The engine a server runs the method on (served_request's)."""
        return self.engine(self.engine_for(method, K, speculative=True)[0])

    def _prompt(self, llm, r: EncodedRequest, method: Method) -> dict:
        """The engine's prompt: the view the engine's own model reads (x_comp on the verifier's engines, x_question
        on the drafter's, its image as embeddings from that engine's vision tower)."""
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
            packed = llm.collective_rpc(
                "asymspec_image_embeddings",
                args=(pack_tensor(view.pixel_values), pack_tensor(view.image_grid_thw)),
            )[0]
            prompt["multi_modal_data"] = {
                "image": {
                    "image_embeds": unpack_tensor(packed, "image embeddings"),
                    "image_grid_thw": view.image_grid_thw,
                }
            }
        return prompt

    def _drafter_tokenizer(self):
        """The drafter's tokenizer (the views it reads are in its ids; one with the verifier's in a same-family
        pair)."""
        return getattr(self.pair.processor, "tokenizer", self.pair.processor)

    def _params(
        self,
        r: EncodedRequest,
        method: Method,
        mode: str,
        cfg: AsymSpecConfig,
        room: int,
    ):
        from vllm import SamplingParams  # lazy: loads vLLM

        banned = self.pair.banned_ids()
        stop_ids = self.pair.stop_ids(cfg)
        vmap = self.pair.vmap
        if mode == "plain" and not vmap.identity and method.engine == "drafter":
            # the drafter alone across a map: its shared tokens only, the stop tokens in its ids (the rule of
            # vocab_align.decide_drafter and MinTokens.mapped)
            banned = vmap.drafter_banned(
                token_mask(banned, vmap.verifier_size, "cpu"), "cpu"
            )
            banned = banned.nonzero().flatten().tolist()
            stop_ids = MinTokens(0, stop_ids, []).mapped(vmap).stop_ids
        elif (
            mode == "plain" and not vmap.identity
        ):  # Floor across a map: the shared set only
            banned = sorted(set(banned) | set(unshared_verifier_ids(vmap)))
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
            mode == "plain"
        ):  # vLLM's own sampler: temperature, top_p, top_k, min_p, seed, min_tokens
            return SamplingParams(**kw, logit_bias={i: float("-inf") for i in banned})
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
            mode,
            cfg,
            x_full=full.ids if full else None,
            pixel_values=full.pixel_values if full else None,
            image_grid_thw=full.image_grid_thw if full else None,
            banned=banned,
            x_comp_drafter=own_comp.ids if own_comp else None,
        )
        return SamplingParams(**kw, extra_args=extra)

    @staticmethod
    def _progress(
        rows, streamed: StreamedStats, on_step, to_verifier, step_outputs: dict
    ) -> None:
        for i, o in step_outputs.items():
            tokens = to_verifier(list(o.outputs[0].token_ids))
            rows[i].sources, rows[i].stats = streamed.step(
                i, len(tokens) - len(rows[i].token_ids)
            )
            rows[i].token_ids = tokens
        on_step(rows)

    @staticmethod
    def row(
        o, method: Method, mode: str, elapsed: float, cfg: AsymSpecConfig | None = None
    ) -> loop.RowOutput:
        """A finished RequestOutput as the method's row (tokens, sources, statistics, finish reason; with
        cfg.logprobs the engine's logprobs, each named by its distribution)."""

        completion = o.outputs[0]
        tokens = list(completion.token_ids)
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
                    if cfg is not None and cfg.logprobs is not None
                    else None
                )
                prompt_lps = (
                    prompt_from_vllm(
                        o.prompt_logprobs, o.prompt_token_ids, cfg.prompt_logprobs
                    )
                    if cfg is not None and cfg.prompt_logprobs is not None
                    else None
                )
            except MissingLogprobsError as e:
                return loop.RowOutput(tokens, sources, stats, "error", str(e))
            return loop.RowOutput(
                tokens,
                sources,
                stats,
                completion.finish_reason,
                text=text,
                logprobs=logprobs,
                prompt_logprobs=prompt_lps,
            )
        return loop.RowOutput(
            tokens,
            sources,
            stats,
            "error",
            f"the engine finished the request with "
            f"'{completion.finish_reason}': {error or 'no detail'}",
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


def unshared_verifier_ids(vmap) -> list[int]:
    """The verifier ids a cross-family pair can never commit (outside its shared set)."""
    return vmap.verifier_banned(None, "cpu").nonzero().flatten().tolist()


def max_model_len(llm) -> int:
    """The context of an engine (vLLM's LLM): every view of a request on it has this many positions."""
    return int(llm.llm_engine.vllm_config.model_config.max_model_len)
