"""The token budget of a request: how many tokens it may generate before the context of a model it runs on is
full, and the refusal of a prompt that leaves no room for one step. Both backends use these rules, so a
request gets the same budget on either; `context_of(model)` is the backend's context length of "drafter",
"sd_drafter" or "verifier" (a model's max_position_embeddings, or a vLLM engine's max_model_len)."""

from __future__ import annotations

from collections.abc import Callable

from ..core.config import AsymSpecConfig
from ..core.errors import PromptTooLongError
from ..core.methods import Method
from .prompt_floor import prompt_floor
from .prompts import EncodedRequest


def room(
    r: EncodedRequest,
    method: Method,
    cfg: AsymSpecConfig,
    context_of: Callable[[str], int],
) -> int:
    """Tokens the request may generate: every source's context minus its view, K drafts and one token."""
    return (
        min(context_of(s.model) - len(r.view(s.view).ids) for s in method.sources)
        - cfg.K
        - 1
    )


def check_fits(
    r: EncodedRequest,
    method: Method,
    cfg: AsymSpecConfig,
    context_of: Callable[[str], int],
) -> None:
    """PromptTooLongError naming the model and view when the request has no room for one step."""
    for s in method.sources:
        length, limit = len(r.view(s.view).ids), context_of(s.model)
        if length + cfg.K + 2 > limit:
            raise PromptTooLongError(
                f"the {s.model.replace('_', ' ')}'s prompt ({s.view}) has {length} tokens; "
                f"its context is {limit} tokens (with K={cfg.K} look-ahead)"
            )


def check_floor_fits(
    roles: list[str],
    owners: tuple,
    method: Method,
    cfg: AsymSpecConfig,
    context_of: Callable[[str], int],
) -> None:
    """PromptTooLongError when even the fewest tokens the conversation's views can have (prompt_floor.py: its
    messages' template frames, for each tokenizer or processor in `owners`) leave no room for one step in a
    context: linear in the messages, before any template renders them (check_fits counts the real prompt)."""
    floor = min(prompt_floor(owner, roles) for owner in owners)
    for s in method.sources:
        limit = context_of(s.model)
        if floor + cfg.K + 2 > limit:
            raise PromptTooLongError(
                f"the conversation has {len(roles)} messages: the {s.model.replace('_', ' ')}'s "
                f"prompt ({s.view}) has at least {floor} tokens of its chat template's frames alone; "
                f"its context is {limit} tokens (with K={cfg.K} look-ahead)"
            )
