"""core/mapped_source.py: the drafter's logit source driven in verifier ids. Each call's ids are checked against a
translation from scratch of the whole y (so a token translated twice, skipped, or through the map read backwards
shows), and forward's tokens and logits pass through untouched."""

import pytest
import torch

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.mapped_source import MappedSource
from asymspec_vl.core.vocab_align import VocabMap

# shared set ordered by verifier id: verifier 0, 2, 5, 7 <-> drafter 3, 1, 4, 0 (Vd 6, Vv 9)
V2D = {0: 3, 2: 1, 5: 4, 7: 0}


class RecordingSource:
    """A LogitSource in drafter ids that records what it is given (copies: MappedSource keeps its lists)."""

    def __init__(self):
        self.calls = []

    def prefill(self):
        self.calls.append(("prefill",))

    def pending(self, y):
        self.calls.append(("pending", [list(r) for r in y]))
        return [r[-1:] for r in y]

    def forward(self, tokens):
        self.calls.append(("forward", [list(r) for r in tokens]))
        return torch.arange(len(tokens) * 6, dtype=torch.float32).reshape(
            len(tokens), 1, 6
        )

    def commit(self, y):
        self.calls.append(("commit", [list(r) for r in y]))


def vmap() -> VocabMap:
    return VocabMap(
        drafter_ids=torch.tensor(list(V2D.values())),
        verifier_ids=torch.tensor(list(V2D)),
        drafter_size=6,
        verifier_size=9,
    )


def from_scratch(y):
    return [[V2D[t] for t in row] for row in y]


def test_pending_and_commit_see_y_in_drafter_ids_as_it_grows():
    inner = RecordingSource()
    src = MappedSource(inner, vmap())
    src.prefill()
    ys = [
        [[], [5]],
        [[2], [5, 7]],
        [[2, 0, 7], [5, 7]],  # rows grow by different amounts
        [[2, 0, 7, 5], [5, 7, 2, 2, 0]],
    ]
    for y in ys:
        assert src.pending(y) == [r[-1:] for r in from_scratch(y)]
        src.commit(y)
    assert inner.calls[0] == ("prefill",)
    assert [c for c in inner.calls[1:]] == [
        (kind, from_scratch(y)) for y in ys for kind in ("pending", "commit")
    ]


def test_own_translates_drafts_and_forward_passes_through():
    inner = RecordingSource()
    src = MappedSource(inner, vmap())
    assert src.own([7, 0, 5, 2, 2]) == [0, 3, 4, 1, 1]
    drafts = [src.own([2, 7]), src.own([0])]
    logits = src.forward(drafts)
    assert inner.calls == [
        ("forward", [[1, 0], [3]])
    ]  # forward takes the source's own ids
    assert logits.shape == (2, 1, 6)  # drafter space [B, n, Vd]: untouched
    assert torch.equal(logits, torch.arange(12, dtype=torch.float32).reshape(2, 1, 6))


def test_an_unshared_verifier_id_has_no_drafter_id():
    src = MappedSource(RecordingSource(), vmap())
    with pytest.raises(
        ConfigError, match=r"verifier ids \[1\] are outside the shared set"
    ):
        src.own([1])  # verifier id 1 is outside the shared set


def test_the_identity_map_changes_nothing():
    inner = RecordingSource()
    src = MappedSource(inner, VocabMap.same_vocabulary(9))
    y = [[8, 0, 3], [4]]
    src.commit(y)
    assert inner.calls == [("commit", y)]
