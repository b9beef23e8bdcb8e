"""Per-request state of an asymspec engine on a worker: parsed inputs, failures, the request's generator when it
samples (its x_full view is the drafter's: full_view.FullRow).

`RequestRegistry` is the one place a request's state is created (from the AsymSpecRequest the scheduler parsed,
in its SamplingParams.extra_args, on the first step the runner sees it), failed and forgotten; the drafter
reads and updates the `RowState`s but never parses a request. What it does not know: any tensor of the
models (the proposer opens a request's x_full view, and frees its caches through `release`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import torch

from asymspec_vl.core import sampling
from asymspec_vl.core.methods import PLAIN_SPECULATIVE, Method
from asymspec_vl.core.min_tokens import MinTokens
from asymspec_vl.inputs.vocab import token_mask

from . import hidden_tokens
from .hidden_tokens import PRIME_KEY
from .request_args import REQUEST_KEY, AsymSpecRequest, EngineFacts


@dataclass
class RowState:
    """request None: a plain speculative-decoding request (no extra_args["asymspec"]). prime and reemit are the
    hidden tokens (hidden_tokens.py)."""

    request: AsymSpecRequest | None
    K: int  # drafts per step: the request's config K (at most the engine's num_speculative_tokens)
    prime: int | None = (
        None  # x_comp's last token, emitted by the first step instead of a sample
    )
    reemit: tuple[int, int] | None = (
        None  # (held-back token, outputs before it) of a resumed request
    )
    failed: str | None = None  # "ErrorType: message" once the request cannot be served
    banned: torch.Tensor | None = (
        None  # [V] bool (across a vocabulary map: [Vd], the drafter's picks)
    )
    banned_v: torch.Tensor | None = (
        None  # across a vocabulary map: [Vv] bool, the verifier-id mask the rules read
    )
    y_drafter: list[int] = field(
        default_factory=list
    )  # across a vocabulary map: y in drafter ids (engine_map.to_drafter_ids)
    # across a vocabulary map: the stop tokens in drafter ids (those the map pairs), held in the drafter's logits
    # below min_tokens (core.min_tokens.MinTokens.mapped's rule); None: the request's stop_ids
    stop_ids_d: tuple[int, ...] | None = None
    banned_ids: tuple[
        int, ...
    ] = ()  # the ids set in `banned` (groups rows that share a mask)
    drafts: list[int] = field(default_factory=list)  # the last proposal
    req_id: str = ""
    generator: torch.Generator | None = (
        None  # the request's draws when it samples (cfg.samples), seeded by cfg.seed
    )
    draft_rng: torch.Tensor | None = (
        None  # the generator's state before the last proposal's draws
    )
    y_len: int = 0  # len(y) when the row last drafted: d_1 is output position y_len

    @cached_property
    def rule_cfg(self):
        """The request's cfg without its seed (the rules never read it; the generator holds it): rows group by it."""
        return self.request.cfg.replace(seed=None)

    @property
    def samples(self) -> bool:
        return self.generator is not None

    def holds(self, position: int) -> bool:
        """Whether output position `position` (of y) is below the request's min_tokens: its stop tokens -inf."""
        return (
            self.request is not None
            and position < self.request.cfg.min_tokens
            and bool(self.request.stop_ids)
        )

    @property
    def method(self) -> Method:
        """The request's method; a plain request's is SD (vLLM's speculative decoding on x_comp)."""
        return self.request.method if self.request is not None else PLAIN_SPECULATIVE

    def committed(self, output_token_ids: list[int]) -> list[int]:
        """y of Algorithm 1."""
        return hidden_tokens.committed(self.prime, output_token_ids)

    def num_committed(self, output_token_ids: list[int]) -> int:
        """len(y), without copying y."""
        return max(len(output_token_ids) - (self.prime is not None), 0)


class RequestRegistry:
    """The engine's requests on this worker, by request id."""

    def __init__(
        self,
        facts: EngineFacts,
        default_banned: tuple[int, ...],
        device: torch.device,
        request_errors: tuple[type[BaseException], ...],
        release: Callable[[str], None],
        vmap=None,
    ):
        """vmap: a cross-family engine's VocabMap (None: one vocabulary).
        request_errors: exceptions of a request's device work that fail only that request
        (faults.request_errors); release(req_id) frees a request's caches."""
        self.facts, self.default_banned, self.device = facts, default_banned, device
        self.request_errors, self.release = request_errors, release
        self.vmap = vmap
        self.rows: dict[str, RowState] = {}
        self.errors: dict[
            str, str
        ] = {}  # failed since the last take_errors: req_id -> "ErrorType: message"
        # rows whose step committed its accepted drafts only, since the last take_errors (grammar_dead_end.py)
        self.cut_steps: set[str] = set()
        self.resumptions = 0  # preempted requests resumed with a held-back token

    def add(self, req_id: str, request) -> RowState:
        """The state of a request seen for the first time. request: the runner's CachedRequestState."""
        params = request.sampling_params
        extra = (params.extra_args if params is not None else None) or {}
        state = self.rows[req_id] = RowState(
            extra.get(REQUEST_KEY),
            self.facts.K,
            prime=extra.get(PRIME_KEY),
            req_id=req_id,
        )
        if state.request is None:
            return state
        state.K = state.request.K
        if (
            state.request.cfg.samples
        ):  # the transformers backend's stream for the same seed
            state.generator = sampling.generators(state.request.cfg, 1, self.device)[0]
        state.banned_ids = tuple(
            sorted(state.request.banned or self.default_banned_verifier_ids())
        )
        if self.vmap is None:
            state.banned = token_mask(
                state.banned_ids, self.facts.vocab_size, self.device
            )
        else:  # banned_ids are verifier ids: the rules read them so, the drafter picks over its shared set
            state.banned_v = token_mask(
                state.banned_ids, self.vmap.verifier_size, self.device
            )
            state.banned = self.vmap.drafter_banned(state.banned_v, self.device)
            state.stop_ids_d = tuple(
                MinTokens(0, set(state.request.stop_ids), []).mapped(self.vmap).stop_ids
            )
        return state

    def default_banned_verifier_ids(self) -> tuple[int, ...]:
        """The engine's default banned set (the drafter's vision specials) in verifier ids: across a map the
        verifier ids of those it shares (read as verifier ids, drafter ids banned other tokens: '"', '#', '%',
        '&' on embedded-llama)."""
        if self.vmap is None:
            return self.default_banned
        d2v = self.vmap.to("cpu").d2v  # [Vd]
        return tuple(int(d2v[d]) for d in self.default_banned if d2v[d] >= 0)

    def fail(self, req_id: str, state: RowState, err: Exception) -> None:
        state.failed = f"{type(err).__name__}: {err}"
        self.errors[req_id] = state.failed
        self.release(req_id)

    def take_errors(self) -> dict[str, str]:
        errors, self.errors = self.errors, {}
        return errors

    def take_cut_steps(self) -> set[str]:
        cut, self.cut_steps = self.cut_steps, set()
        return cut

    def forget(self, req_ids) -> None:
        for req_id in req_ids:
            self.rows.pop(req_id, None)
            self.release(req_id)

    def drop_drafts(self, req_id: str) -> None:
        """A preempted request: the scheduler dropped its last proposal, so that proposal's draws are undone (the
        request drafts again when it resumes, from the stream the transformers loop would draw them from)."""
        state = self.rows.get(req_id)
        if state is not None and state.draft_rng is not None:
            state.generator.set_state(state.draft_rng)
            state.draft_rng = None

    def note_resumed(self, cached_reqs, requests: dict) -> None:
        """Mark resumed requests whose prefill re-emits a held-back token (hidden_tokens.note_resumed)."""
        self.resumptions += hidden_tokens.note_resumed(self.rows, cached_reqs, requests)
