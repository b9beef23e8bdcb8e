"""The token budget (budget.py): room leaves K drafts and the bonus token inside every context, and a prompt
with no room for one step is refused, exactly at the boundary."""

from types import SimpleNamespace

import pytest

from asymspec_vl import AsymSpecConfig, PromptTooLongError
from asymspec_vl.inputs.budget import check_fits, room


def _request(length: int):
    """A stand-in EncodedRequest whose x_comp view has `length` tokens, for a method scored by the verifier."""
    req = SimpleNamespace(view=lambda view: SimpleNamespace(ids=[0] * length))
    method = SimpleNamespace(sources=[SimpleNamespace(model="verifier", view="x_comp")])
    return req, method


@pytest.mark.parametrize("K", [1, 2, 4])
def test_room_leaves_k_drafts_and_the_bonus_token(K):
    context, length = 100, 10
    req, method = _request(length)
    n = room(req, method, AsymSpecConfig(K=K), lambda model: context)
    assert (
        n == context - length - K - 1
    )  # the last step verifies K drafts and adds one bonus token
    assert length + n + K + 1 == context  # ... and its positions still fit the context


@pytest.mark.parametrize("K", [1, 2, 4])
def test_a_prompt_with_no_room_for_one_step_is_refused_at_the_boundary(K):
    context, cfg = 50, AsymSpecConfig(K=K)
    fits, full = _request(context - K - 2), _request(context - K - 1)
    assert room(*fits, cfg, lambda m: context) == 1
    check_fits(*fits, cfg, lambda m: context)  # one token of room: served
    assert room(*full, cfg, lambda m: context) == 0
    with pytest.raises(
        PromptTooLongError,
        match=f"has {context - K - 1} tokens; its context is {context} tokens",
    ):
        check_fits(*full, cfg, lambda m: context)  # no room for one step: refused
