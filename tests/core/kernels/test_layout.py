"""core/kernels/layout.py: the row layout the gate kernels read is checked before any kernel runs, each fault a
typed InputError saying what was expected (a, b, t floating, one shape, one device, a vocabulary; drafts [B, K]
and num_drafts [B] of int32/int64; banned a bool [V] on the logits' device)."""

import pytest
import torch

from asymspec_vl.core.errors import InputError
from asymspec_vl.core.kernels.layout import check_banned, check_logits, check_padded

B, K, V = 2, 3, 5


def logits(*shape, dtype=torch.float32):
    return torch.zeros(*(shape or (B, K + 1, V)), dtype=dtype)


def test_a_good_layout_passes():
    check_padded(
        logits(),
        logits(),
        logits(),
        torch.zeros(B, K, dtype=torch.long),
        torch.full((B,), K),
        torch.zeros(V, dtype=torch.bool),
    )
    check_padded(
        logits(), logits(), logits(), torch.zeros(B, K, dtype=torch.int32), None, None
    )


@pytest.mark.parametrize(
    "a, b, t, ndim, message",
    [
        (
            logits(dtype=torch.long),
            logits(),
            logits(),
            3,
            "logits a must be a floating tensor with 3 dims",
        ),
        (
            logits(),
            logits(B, K + 1),
            logits(),
            3,
            "logits b must be a floating tensor with 3 dims",
        ),
        (logits(), logits(), [0.0], 3, "logits t must be a floating tensor"),
        (
            logits(),
            logits(B, K, V),
            logits(),
            3,
            r"logits a, b, t differ in shape: \(2, 4, 5\), \(2, 3, 5\)",
        ),
        (
            logits(B, K + 1, 0),
            logits(B, K + 1, 0),
            logits(B, K + 1, 0),
            3,
            "vocabulary dimension .* is empty",
        ),
    ],
)
def test_bad_logits_are_typed_errors_naming_the_tensor(a, b, t, ndim, message):
    with pytest.raises(InputError, match=message):
        check_logits(a, b, t, ndim)


def test_bad_drafts_num_drafts_and_banned_are_typed_errors():
    a = logits()
    with pytest.raises(
        InputError,
        match=r"drafts must be int32/int64 \[2, 3\], got torch.int64 \(2, 4\)",
    ):
        check_padded(a, a, a, torch.zeros(B, K + 1, dtype=torch.long), None, None)
    with pytest.raises(InputError, match="drafts must be int32/int64"):
        check_padded(a, a, a, torch.zeros(B, K), None, None)  # float drafts
    with pytest.raises(InputError, match=r"num_drafts must be int32/int64 \[2\]"):
        check_padded(
            a,
            a,
            a,
            torch.zeros(B, K, dtype=torch.long),
            torch.zeros(B + 1, dtype=torch.long),
            None,
        )
    with pytest.raises(InputError, match=r"banned must be a bool tensor \[5\]"):
        check_banned(torch.zeros(V), V, a.device)
    with pytest.raises(InputError, match=r"banned must be a bool tensor \[5\]"):
        check_banned(torch.zeros(V + 1, dtype=torch.bool), V, a.device)
