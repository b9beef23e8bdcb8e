"""The fewest tokens a conversation's prompt can have, known from its roles alone before any template renders it.

Each message is framed by its chat template's added tokens (ChatML: <|im_start|> and <|im_end|>), which are
tokenized apart from any text (user_text.encode_segments), so a conversation of n messages holds at least the sum of
its messages' frames whatever their texts. The frame of each role is measured once per template, as the added
tokens one more message of that role adds to a short conversation; a role the template refuses to place that way
counts 0 (the floor stays a lower bound). A conversation whose floor is over a context is refused in time linear in
its messages (budget.check_floor_fits), before its templates render it whole."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from .user_text import _added_ids, sentinel, template_segments

ROLES = ("system", "user", "assistant")


def _added_count(owner, roles: Sequence[str]) -> int | None:
    """The added tokens of the template around a conversation of `roles` (empty texts); None: it did not render."""
    tokenizer = getattr(owner, "tokenizer", owner)
    messages = [{"role": r, "content": sentinel(i)} for i, r in enumerate(roles)]
    try:
        segments = template_segments(owner, messages, len(messages))
    except Exception:  # noqa: BLE001 (any template error: the role's frame is not measured, so it counts 0)
        return None
    added = _added_ids(tokenizer)
    return sum(
        i in added
        for k, piece in enumerate(segments)
        if not k % 2 and piece
        for i in tokenizer(piece, add_special_tokens=False)["input_ids"]
    )


@lru_cache(maxsize=16)
def role_frames(owner) -> dict[str, int]:
    """{role: the fewest added tokens the template of `owner` (a tokenizer or processor) frames a message with}."""
    base = _added_count(owner, ["user"])
    frames = {}
    for role in ROLES:
        more = _added_count(owner, [role, "user"])
        frames[role] = (
            max(0, more - base) if base is not None and more is not None else 0
        )
    return frames


def prompt_floor(owner, roles: Sequence[str]) -> int:
    """The fewest tokens any view `owner` tokenizes can have for a conversation of these roles (messages in
    order; "developer" reads as "system")."""
    frames = role_frames(owner)
    return sum(frames.get("system" if r == "developer" else r, 0) for r in roles)
