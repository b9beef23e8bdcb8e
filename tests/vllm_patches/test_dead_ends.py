"""vllm_patches/grammar_dead_end.py without an engine: a dead end is a position whose grammar-masked t holds no
finite score outside the excluded tokens (across a map: outside the shared set); a structured row there commits its
accepted drafts only, or fails alone with a GrammarDeadEndError naming the position and the constraint; rows without
a structured output, and rows with a committable token, are left as the rule decided. The sampled rules across a
map decide a dead-end row without raising (the dead end then drops their token)."""

from types import SimpleNamespace

import pytest
import torch
from vllm.sampling_params import StructuredOutputsParams

from asymspec_vl.core import vocab_sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import GrammarDeadEndError
from asymspec_vl.core.gate import StepOutcome
from asymspec_vl.core.vocab_align import VocabMap
from vllm_patches.grammar_dead_end import constraint_text, cut_dead_ends, dead_ends
from vllm_patches.requests.rows import RowState
from vllm_patches.sampler import StepBatch

NEG = float("-inf")
# drafter ids 0..3 <-> verifier ids 1, 2, 4, 5; verifier ids 0 and 3 are unshared
VMAP = VocabMap(torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 4, 5]), 4, 6)
OUTSIDE = VMAP.verifier_banned(None, "cpu")  # [6]: ids 0 and 3


def _t(*allowed_per_position):
    """t [1, n+1, 6]: 0 at the allowed verifier ids of each position, -inf elsewhere (the grammar's bitmask)."""
    t = torch.full((1, len(allowed_per_position), 6), NEG)
    for j, ids in enumerate(allowed_per_position):
        t[0, j, list(ids)] = 0.0
    return t


def test_a_dead_end_is_a_position_with_no_allowed_shared_token():
    t = torch.cat([_t([3], [1]), _t([1, 3], []), _t([0], [2])])  # [3, 2, 6]
    at_first = dead_ends(t, torch.tensor([0, 0, 0]), OUTSIDE)
    assert at_first.tolist() == [
        True,
        False,
        True,
    ]  # only unshared 3; shared 1; only unshared 0
    assert dead_ends(t, torch.tensor([1, 1, 1]), OUTSIDE).tolist() == [
        False,  # shared 1
        True,  # nothing at all
        False,  # shared 2
    ]
    # one vocabulary (nothing excluded): an allowed token is a committable one
    assert dead_ends(t, torch.tensor([0, 0, 0]), None).tolist() == [False] * 3
    held = torch.full(
        (1, 1, 6), float("nan")
    )  # a row all -inf under min_tokens' hold, through a softmax
    assert dead_ends(held, torch.tensor([0]), None).tolist() == [True]


def test_the_constraint_is_named_and_cut():
    assert constraint_text(StructuredOutputsParams(regex="[0-9]Ω")) == "regex '[0-9]Ω'"
    long = constraint_text(StructuredOutputsParams(choice=["x" * 200]))
    assert long.startswith("choice '[\"xxx") and long.endswith("...'")
    assert len(long) < 100


def _engine(structured: list[bool], outputs: list[list[int]]):
    rows = {f"r{i}": RowState(None, 2, req_id=f"r{i}") for i in range(len(outputs))}
    failed = {}
    proposer = SimpleNamespace(
        vmap=VMAP,
        registry=SimpleNamespace(cut_steps=set()),
        row=rows.__getitem__,
        fail=lambda req_id, state, err: failed.setdefault(req_id, err),
    )
    params = [
        SimpleNamespace(
            structured_outputs=StructuredOutputsParams(regex="[0-9]Ω") if s else None
        )
        for s in structured
    ]
    batch = StepBatch(list(rows), outputs, params, {}, None)
    return proposer, batch, failed


def test_a_structured_row_at_a_dead_end_commits_its_accepted_drafts_or_fails_alone():
    # four rows, drafts [1, 2] each: a dead end after one accepted draft, a dead end at once, the same dead end
    # without a structured output, a structured row whose position allows a shared token
    proposer, batch, failed = _engine(
        [True, True, False, True], [[7, 7], [7, 7, 7], [7], []]
    )
    t = torch.cat(
        [_t([1], [3], [1]), _t([0], [1], [1]), _t([3], [1], [1]), _t([4], [1], [1])]
    )
    drafts = torch.tensor([[1, 2]] * 4)
    outcome = StepOutcome(
        torch.tensor([1, 0, 0, 0]),
        torch.tensor([0, 0, 0, 4]),
        torch.zeros(4, dtype=torch.bool),
    )
    committed = cut_dead_ends(
        proposer,
        batch,
        [0, 1, 2, 3],
        t,
        outcome,
        None,  # nothing banned: across the map the unshared ids (OUTSIDE) are excluded
        outcome.committed(drafts),
    )
    assert committed == [[1], [], [0], [4]]
    assert proposer.registry.cut_steps == {"r0"}
    assert list(failed) == ["r1"] and isinstance(failed["r1"], GrammarDeadEndError)
    message = str(failed["r1"])
    assert "regex '[0-9]Ω'" in message and "at output position 3 " in message
    assert "no token of the 4 the drafter and the verifier share" in message
    assert "allows 1 verifier tokens there" in message


def test_a_row_already_failing_is_not_failed_again():
    proposer, batch, failed = _engine([True], [[7]])
    proposer.row("r0").failed = "ConfigError: earlier"
    outcome = StepOutcome(
        torch.tensor([0]), torch.tensor([0]), torch.zeros(1, dtype=torch.bool)
    )
    cut_dead_ends(
        proposer,
        batch,
        [0],
        _t([3]),
        outcome,
        None,
        [[0]],
    )
    assert not failed and proposer.row("r0").failed == "ConfigError: earlier"


@pytest.mark.parametrize("name", ["asymspec", "sd", "scd"])
def test_the_sampled_rules_decide_a_dead_end_row_without_raising(name):
    cfg = AsymSpecConfig(K=1, temperature=1.0, top_k=3, top_p=0.9)
    t = _t([3], [3])  # [1, 2, 6]: only the unshared verifier id 3, at both positions
    logits = {"t": t, "a": torch.randn(1, 2, 4), "b": torch.randn(1, 2, 4)}
    logits["sd"] = logits["b"][:, :1]
    gens = [torch.Generator().manual_seed(0)]
    out = vocab_sampling.sample(
        name, cfg, logits, torch.tensor([[1]]), None, VMAP, gens
    )
    assert dead_ends(t, out.num_accepted, OUTSIDE).tolist() == [True]
