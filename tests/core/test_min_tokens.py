"""core/min_tokens.py: stop tokens are -inf exactly at the output positions below min_tokens, a draft position
k > 0 judged at len(y) + k (not at len(y))."""

import torch

from asymspec_vl.core.min_tokens import MinTokens, hold_stops

STOP = [3, 5]


def held(x: torch.Tensor) -> list[list[bool]]:
    """[B, n] whether the stop tokens are -inf at each position."""
    return torch.isinf(x[..., STOP]).all(-1).tolist()


def test_the_stops_are_held_at_the_positions_below_min_tokens_only():
    x = torch.zeros(2, 4, 8)
    # row 0 has 1 token out, row 1 has 4: positions 1+j and 4+j, j < 4, held below 3
    assert held(hold_stops(x, [1, 4], 0, 3, STOP)) == [
        [True, True, False, False],
        [False] * 4,
    ]
    assert not torch.isinf(x).any()  # the input is left as it is
    assert hold_stops(x, [4, 4], 0, 3, STOP) is x  # nothing held: x itself


def test_a_draft_position_counts_its_offset():
    x = torch.zeros(1, 1, 8)
    assert held(hold_stops(x, [2], 0, 3, STOP)) == [[True]]  # position 2 < 3
    assert held(hold_stops(x, [2], 1, 3, STOP)) == [
        [False]
    ]  # draft k = 1: position 3, not held
    y = [[7, 7]]
    assert held(MinTokens(3, set(STOP), y).mask(x, 1)) == [[False]]
    assert held(MinTokens(4, set(STOP), y).mask(x, 1)) == [[True]]
    assert torch.equal(
        hold_stops(x, [0], 0, 3, [])[0], x[0]
    )  # no stop tokens: nothing held
