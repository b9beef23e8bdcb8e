"""Public API: AsymSpecVL.from_pretrained(drafter=..., verifier=...).generate(image, question, ...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from .backends.vllm.vllm_backend import VLLMBackend
from .core.config import AsymSpecConfig, is_one_of, with_overrides
from .core.errors import (
    BatchInputError,
    ConfigError,
    InputError,
    ModelPairError,
    RequestFailedError,
)
from .core.logprobs import PromptLogprob, TokenLogprob
from .core.loop import RowOutput
from .core.methods import method as method_named
from .core.parallelism import refuse_pipeline_parallelism
from .core.request_plan import RequestPlan
from .core.structured import refuse_on_backend
from .core.trace import Stats
from .inputs import budget
from .inputs.conversation import Conversation, encode
from .inputs.prompts import EncodedRequest, Prompts, Request
from .pair.defaults import resolve
from .pair.model_pair import ModelPair
from .pair.model_source import Weights, pair_names
from .pair.shared_vocab import SharedVocabulary
from .stream import TextStream
from .timing import set_threads

if TYPE_CHECKING:
    from .backends.interface import Backend

from .pair.defaults import BACKENDS, DEFAULT_DRAFTER, DEFAULT_VERIFIER  # noqa: E402 (kept importable from here)

ON_ERROR = ("mark", "raise")


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
    finish_reason: str  # "stop" | "length" | "error" (the model run failed on this request: see `error`)
    meta: dict = field(default_factory=dict)
    error: str = ""
    # with config logprobs=k: per token (token_ids' order) its logprob, k top alternatives and the distribution it
    # was chosen from (t, q, a, fused, contrastive: asymspec_vl/core/logprobs.py); None when not asked
    logprobs: list[TokenLogprob] | None = None
    # with config prompt_logprobs=k: per token of the verifier's prompt (x_comp) its logprob after the tokens
    # before it, rank and k top alternatives, None for the first token; None when not asked
    prompt_logprobs: list[PromptLogprob | None] | None = None
    # what the pair's vocabularies share: one family, or cross-family with the shared set (pair/shared_vocab.py)
    vocabulary: SharedVocabulary | None = None

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "method": self.method,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "stats": self.stats.to_dict(),
            "trace": [t.__dict__ for t in self.trace],
            "prompts": self.prompts.__dict__,
            "config": self.config.to_dict(),
            **self.meta,
            **(
                {"vocabulary": self.vocabulary.to_dict()}
                if self.vocabulary is not None
                else {}
            ),
            **(
                {"logprobs": [x.to_dict() for x in self.logprobs]}
                if self.logprobs is not None
                else {}
            ),
            **(
                {"prompt_logprobs": [x and x.to_dict() for x in self.prompt_logprobs]}
                if self.prompt_logprobs is not None
                else {}
            ),
        }


def trace_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The trace's text of each token: token_pieces with special tokens (the end token) adding "", as the
    answer's text drops them, so the trace joins to that text (the library's result and the server's alike)."""
    return TokenPieces(tokenizer, skip_special_tokens=True).push(ids)


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token adds. A character split over several byte-level tokens is shown on the token
    that completes it (the earlier ones add ""), so the pieces join to the decoded text."""
    return TokenPieces(tokenizer).push(ids)


class TokenPieces:
    """token_pieces token by token, for tokens that arrive in parts (a stream); skip_special_tokens: special
    tokens add "" (trace_pieces)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self.tokenizer, self.held = tokenizer, []
        self.special = set(tokenizer.all_special_ids) if skip_special_tokens else set()

    def push(self, ids: list[int]) -> list[str]:
        pieces = []
        for i in ids:
            self.held.append(i)
            text = self.tokenizer.decode(self.held)
            if (
                text.endswith("\ufffd") and len(self.held) < 4
            ):  # an incomplete UTF-8 sequence: wait for its end
                pieces.append("")
                continue
            pieces.append("" if i in self.special else text)
            self.held = []
        return pieces


class AsymSpecVL:
    """A vision-language drafter reading the image steers a text-only verifier reading caption + OCR."""

    def __init__(self, pair: ModelPair, backend: Backend, names: dict):
        self.pair, self.backend, self.names = pair, backend, names

    @classmethod
    def from_pretrained(
        cls,
        drafter: str | None = None,
        verifier: str | None = None,
        backend: str = "hf",
        text_drafter: str | None = None,
        device: str | None = None,
        dtype="auto",
        trust_remote_code: bool = False,
        threads: int | None = 1,
        images: bool = True,
        **backend_kwargs,
    ) -> AsymSpecVL:
        """Load by hub id or local path ("embedded": the offline toy pair; `embedded` on one side means
        `embedded` on the other unless both are given; None: DEFAULT_DRAFTER / DEFAULT_VERIFIER).
        backend: "hf" (transformers) or "vllm" (the patched vLLM 0.19 path). A name that cannot load (a bad
        path, a folder without config.json, a hub id offline and not cached) raises ModelPairError.
        threads: torch's CPU threads (torch.set_num_threads, process-wide) when the hf backend decodes on the
        CPU; batch-1 decoding is fastest and steadiest on one (the command line's --threads). None or 0: torch's
        setting is left as it is.
        images: the drafter reads images, so it must be Qwen3-VL; images=False lets a text-only drafter serve
        text-only requests (Request(question=..., full_context=...)). What each model must have is checked from
        its files before any weight loads (pair/preflight.py, docs/models.md): each gap raises its own
        ModelPairError (UnsupportedModelError, ModelFilesError, ChatTemplateError, HeadSizeError)."""

        if backend not in BACKENDS:
            raise ConfigError(
                f"backend={backend!r} is invalid: expected one of {BACKENDS}"
            )
        refuse_pipeline_parallelism(
            backend_kwargs.get("pipeline_parallel_size"), "pipeline_parallel_size"
        )
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 0
        ):
            raise ConfigError(
                f"threads={threads!r} is invalid: expected an integer >= 0 or None"
            )
        drafter, verifier = pair_names(
            drafter, verifier, DEFAULT_DRAFTER, DEFAULT_VERIFIER
        )
        weights = Weights.for_backend(
            backend, backend_kwargs
        )  # random only for vLLM's dummy loader
        paths = {
            role: resolve(role, name, weights)
            for role, name in (
                ("drafter", drafter),
                ("verifier", verifier),
                ("text_drafter", text_drafter),
            )
        }
        try:
            pair = ModelPair.load(
                paths["drafter"],
                paths["verifier"],
                paths["text_drafter"],
                trust_remote_code,
                backend=backend,
                images=images,
            )
            if backend == "hf":
                from .backends.hf.hf_backend import (
                    HFBackend,
                )  # lazy: loads transformers

                set_threads(threads or 0, device)
                impl = HFBackend.load(
                    pair,
                    paths["drafter"],
                    paths["verifier"],
                    paths["text_drafter"],
                    device,
                    dtype,
                    trust_remote_code,
                )
            else:
                impl = VLLMBackend.load(
                    pair,
                    paths["drafter"],
                    paths["verifier"],
                    paths["text_drafter"],
                    dtype=dtype,
                    **backend_kwargs,
                )
        except (
            OSError,
            TypeError,
        ) as e:  # transformers on a folder missing a file (weights, tokenizer), a gated repo
            first = (
                str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            )
            raise ModelPairError(
                f"loading drafter {drafter!r} / verifier {verifier!r} failed: {first} (`embedded` "
                "names the offline toy pair; HF_HUB_OFFLINE=1 loads cached hub ids)"
            ) from e
        names = {
            "drafter": paths["drafter"],
            "verifier": paths["verifier"],
            "text_drafter": paths["text_drafter"],
            "backend": backend,
        }
        return cls(pair, impl, names)

    @property
    def tokenizer(self):
        """The verifier's tokenizer (the pair shares one vocabulary)."""
        return self.pair.tokenizer

    def generate(
        self,
        image=None,
        question: str = "",
        caption: str = "",
        ocr: str = "",
        method: str = "asymspec",
        config: AsymSpecConfig | dict | None = None,
        full_context: str | None = None,
        compressed_context: str | None = None,
        on_step: Callable | None = None,
        **overrides,
    ) -> GenerationResult:
        """Answer one question. With an image: the drafter reads image + text, the verifier caption + OCR.
        Text-only AsymSpec: pass full_context (drafter) and compressed_context (verifier) instead.
        Text arguments are str (caption / ocr None read as ""); config may be a dict of AsymSpecConfig
        fields, and keyword overrides (max_new_tokens=64, K=4, beta=..., gamma=...) replace its fields.
        A bad argument raises its own typed error (InvalidTextError, InvalidImageError, ...,
        ConfigError for an unknown or invalid field) naming it; a failed model run raises RequestFailedError.
        Sampling (temperature > 0, top_p, top_k, min_p, seed) and stop strings follow vLLM's SamplingParams;
        AsymSpec at temperature tau > 0 is this project's extension of the paper's greedy Algorithm 1: drafts
        drawn from the drafter's filtered softmax(a / tau), the gate unchanged (temperature 1), the token at a
        rejection drawn from filtered softmax((t + beta * delta) / tau), the bonus from softmax(t / tau); tau -> 0
        is Algorithm 1 exactly. SD samples losslessly (speculative sampling). docs/python-api.md, "Sampling"."""
        req = Request(image, question, caption, ocr, full_context, compressed_context)
        return self.generate_batch(
            [req], method, config, on_step, on_error="raise", **overrides
        )[0]

    def generate_chat(
        self,
        messages: list,
        method: str = "asymspec",
        config: AsymSpecConfig | dict | None = None,
        on_step: Callable | None = None,
        **overrides,
    ) -> GenerationResult:
        """Answer the last user turn of a conversation: `messages` as OpenAI's (system / user / assistant),
        images as {"type": "image", "image": ..., "caption": ..., "ocr": ...} parts of user turns (see
        asymspec_vl/inputs/conversation.py for the three views it makes). Arguments and errors as generate's."""
        return self.generate_batch(
            [Conversation(messages)],
            method,
            config,
            on_step,
            on_error="raise",
            **overrides,
        )[0]

    def stream(
        self,
        image=None,
        question: str = "",
        caption: str = "",
        ocr: str = "",
        method: str = "asymspec",
        config: AsymSpecConfig | dict | None = None,
        full_context: str | None = None,
        compressed_context: str | None = None,
        **overrides,
    ) -> TextStream:
        """generate(...) as text deltas: `for delta in vl.stream(image, question): print(delta, end="")`.
        Breaking out of the loop (or stream.close()) stops the decoding; once the loop ends `stream.result`
        is the GenerationResult. Arguments and errors as generate's (a bad argument is raised at once)."""
        cfg = with_overrides(config, overrides)
        plan = self.backend.plan_request(method_named(method), cfg)
        request = Request(
            image, question, caption, ocr, full_context, compressed_context
        )
        self._validated([request], plan)  # bad input raises here, not in the worker
        return TextStream(
            lambda on_step: self._generate([request], plan, on_step, "raise")[0],
            self.decode,
            cfg.stop,
            cfg.include_stop_str_in_output,
            cfg.min_tokens,
        )

    def close(self) -> None:
        """Release the backend's engines and memory (vLLM: shut its engines down)."""
        self.backend.close()

    def __enter__(self) -> AsymSpecVL:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def generate_batch(
        self,
        requests: list[Request],
        method: str = "asymspec",
        config: AsymSpecConfig | dict | None = None,
        on_step: Callable | None = None,
        on_error: str = "mark",
        **overrides,
    ) -> list[GenerationResult]:
        """Decode many requests together (different prompt lengths are fine).

        Every request is validated before any model runs: bad ones raise one BatchInputError naming each
        by index (`errors`: index -> its typed error); a batch of one raises that request's own error.
        If the model run fails on some requests, the others' results still come back: with
        on_error="mark" (the default) a failed request's result has finish_reason "error" and the
        message in `error`; with on_error="raise" a RequestFailedError carries all results. Keyword
        overrides replace AsymSpecConfig fields of `config` (max_new_tokens=64, K=4, ...)."""
        cfg = with_overrides(config, overrides)
        return self._generate(
            requests,
            self.backend.plan_request(method_named(method), cfg),
            on_step,
            on_error,
        )

    def _generate(
        self,
        requests: list[Request],
        plan: RequestPlan,
        on_step: Callable | None,
        on_error: str,
    ) -> list[GenerationResult]:
        """generate_batch on the request's plan (made once, where the method and config were parsed)."""
        self.pair.check_stop_ids(plan.cfg)
        if not is_one_of(on_error, ON_ERROR):
            raise ConfigError(
                f"on_error={on_error!r} is invalid: expected one of {ON_ERROR}"
            )
        if on_step is not None and not callable(on_step):
            raise ConfigError(
                f"on_step must be callable or None, got {type(on_step).__name__}"
            )
        encoded = self._validated(requests, plan)
        if not encoded:
            return []
        outputs = self.backend.run(encoded, plan, on_step=on_step)
        results = [self._result(e, o) for e, o in zip(encoded, outputs)]
        failed = [i for i, r in enumerate(results) if r.finish_reason == "error"]
        if failed and on_error == "raise":
            raise RequestFailedError(results, failed)
        return results

    def _validated(self, requests, plan: RequestPlan) -> list[EncodedRequest]:
        """Encode every request and check it fits the models' context; collect every bad one by index."""
        method, cfg = plan.method, plan.cfg
        refuse_on_backend(cfg, self.backend.name)
        context = partial(self.backend.context_length, plan=plan)
        if not isinstance(requests, (list, tuple)):
            raise InputError(
                f"requests must be a list of Request or Conversation, got {type(requests).__name__}"
            )
        encoded, errors = [], {}
        for i, r in enumerate(requests):
            try:
                enc = encode(
                    r, self.pair.processor, self.pair.tokenizer, self.pair.cross_map
                )
                budget.check_fits(enc, method, cfg, context)
                encoded.append(enc)
            except InputError as e:
                errors[i] = e
        if len(requests) == 1 and errors:
            raise errors[0]
        if errors:
            raise BatchInputError(errors, len(requests))
        return encoded

    def decode(self, token_ids: list[int]) -> str:
        return self.pair.decode(token_ids)

    def _result(self, enc, out: RowOutput) -> GenerationResult:
        """The row as the result; its method and config are the plan the backend ran (carried back on the row)."""
        pieces = trace_pieces(self.pair.tokenizer, out.token_ids)
        trace = [
            TraceToken(i, p, s) for i, p, s in zip(out.token_ids, pieces, out.sources)
        ]
        text = (
            out.text if out.text is not None else self.decode(out.token_ids)
        )  # a stop string cut it
        return GenerationResult(
            text,
            out.token_ids,
            trace,
            out.stats,
            enc.prompts,
            out.plan.method.name,
            out.plan.cfg,
            out.finish_reason,
            dict(enc.meta),
            out.error,
            out.logprobs,
            out.prompt_logprobs,
            self.pair.vocabulary,
        )
