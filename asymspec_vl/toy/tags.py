"""Intermediate supervision of the toy drafter's two-hop lookup ("what number is on the red circle?": find
the image token of the red circle, read its digit). A tiny drafter trained on next-token loss alone
plateaus near 55% first-digit accuracy: it reads digits but often of the wrong shape. Here a linear head
on the first decoder layer's output at every colour and shape word of the prompt predicts the digit that
shape carries, which trains the first hop (word -> image token) directly; the answer position then only
has to find the question's shape word. The head is used in training only and is not saved."""

from __future__ import annotations

import torch
from torch import nn

from .draw import COLOURS, SHAPES

TAG_LAYER = 1  # hidden_states[1]: the output of the first decoder layer


def word_token_ids(tokenizer) -> dict[int, str]:
    """Token id -> word, for the colour and shape words as they appear after a space (one token each)."""
    out = {}
    for word in (*COLOURS, *SHAPES):
        ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(
                f"' {word}' is {len(ids)} tokens in this tokenizer; the tag head needs one"
            )
        out[ids[0]] = word
    return out


def tag_targets(
    ids: list[int], upto: int, words: dict[int, str], items, row: int
) -> list[tuple[int, int, int]]:
    """(row, position, digit) for each colour/shape word among ids[:upto] (the prompt) naming an item."""
    digit = {it.colour: it.digit for it in items} | {it.shape: it.digit for it in items}
    return [
        (row, p, digit[words[t]])
        for p, t in enumerate(ids[:upto])
        if t in words and words[t] in digit
    ]


class TagHead(nn.Module):
    """Digit logits [N, 10] from first-layer hidden states at tagged positions."""

    def __init__(self, hidden: int):
        super().__init__()
        self.proj = nn.Linear(hidden, 10)

    def loss(
        self, hidden_states: tuple[torch.Tensor, ...], tags: torch.Tensor
    ) -> torch.Tensor:
        """tags: [N, 3] (row, position, digit); hidden_states from a forward with output_hidden_states."""
        h = hidden_states[TAG_LAYER][tags[:, 0], tags[:, 1]]  # [N, D]
        return nn.functional.cross_entropy(self.proj(h), tags[:, 2])
