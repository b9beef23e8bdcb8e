"""harness.py on fakes: the recordings hook the proposer and the sampler only while on, from outside, and record
what the sampler's rule read (b, steps) and what the proposer drafted from (a)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asymspec_vl.core.methods import DRAFTED
from vllm_patches import sampler
from vllm_patches.drafter.proposer import AsymSpecProposer
from vllm_patches.hooks import harness

ROOT = Path(__file__).resolve().parents[3]
V = 5


class FakeState:
    def __init__(self, drafts):
        self.drafts, self.K = drafts, len(drafts)
        self.request = SimpleNamespace(x_full=[1, 2, 3])

    def committed(self, output_ids):
        return list(output_ids)


class FakeProposer:
    step_logits = AsymSpecProposer.step_logits
    vmap = None  # one vocabulary

    def __init__(self):
        self.runner = SimpleNamespace(
            requests={
                "r0": SimpleNamespace(prompt_token_ids=[7, 8], output_token_ids=[9]),
                "r1": SimpleNamespace(prompt_token_ids=[6], output_token_ids=[]),
            },
            input_batch=SimpleNamespace(req_ids=["r0", "r1"], num_reqs=2),
            discard_request_mask=SimpleNamespace(np=np.array([False, False, True])),
        )
        self.states = {"r0": FakeState([3, 4]), "r1": FakeState([1, 1])}
        self.a = torch.arange(2 * 3 * V, dtype=torch.float32).view(2, 3, V)
        self.full = SimpleNamespace(
            logits=lambda req_ids, n: torch.stack(
                [self.a[int(r[1:]), :n] for r in req_ids]
            ),
            rows={
                r: SimpleNamespace(ledger=SimpleNamespace(prompt=[1, 2, 3]))
                for r in self.states
            },
        )
        self.comp = SimpleNamespace(
            logits=lambda token_index: token_index.float()[:, None].expand(-1, V) * 10
        )

    def row(self, req_id):
        return self.states[req_id]

    def propose(self, plan, images=None):
        return {req_id: state.drafts for req_id, state, _ in plan.full_rows}


def _step(drafter):
    """One sampler group of rows r0, r1 with 2 drafts each (the rule reads t and b)."""
    logits = torch.randn(6, V)
    batch = SimpleNamespace(req_ids=["r0", "r1"])
    drafts = torch.tensor([[3, 4], [1, 1]])
    return sampler._logits(
        SimpleNamespace(reads=("t", "b")),
        drafter,
        batch,
        logits,
        torch.arange(6),
        [0, 3, 6],
        [0, 1],
        drafts,
        None,
    )


def test_no_hook_without_a_recording_and_none_left_after_one():
    drafter = FakeProposer()
    original = sampler._logits
    assert not harness.hooked(drafter)
    harness.record(drafter, "proposals")
    harness.record(drafter, "steps")
    assert harness.hooked(drafter) and sampler._logits is not original
    harness.record(drafter, "proposals", on=False)
    assert harness.hooked(drafter)  # the steps recording is still on
    harness.record(drafter, "steps", on=False)
    assert (
        not harness.hooked(drafter)
        and sampler._logits is original
        and "propose" not in vars(drafter)
    )


def test_the_hot_path_holds_no_capture_code():
    """The drafting passes, the proposer and the sampler's loop name no recording (the harness wraps them)."""
    for name in (
        "drafter/full_view.py",
        "drafter/comp_view.py",
        "drafter/proposer.py",
        "sampler.py",
    ):
        code = "\n".join(
            line.split("#")[0]
            for line in (ROOT / "vllm_patches" / name).read_text().splitlines()
        )
        recording = r"LogitCapture|StepCapture|\.capture\b|step_capture|harness\.|record_"  # not CUDA-graph capture
        assert not re.search(recording, code.split('"""', 2)[-1]), name


def test_a_recording_holds_what_the_rule_read_and_what_was_drafted():
    drafter = FakeProposer()
    harness.record(drafter, "proposals")
    harness.record(drafter, "steps")
    try:
        out = _step(drafter)
        plan = SimpleNamespace(full_rows=[("r0", drafter.states["r0"], [1, 2, 3])])
        assert drafter.propose(plan) == {"r0": [3, 4]}
        rec = harness.recording(drafter)
        proposals, steps = rec.proposals, rec.steps
    finally:
        harness.record(drafter, "proposals", on=False)
        harness.record(drafter, "steps", on=False)
    assert torch.equal(proposals["r0"]["b"][0]["b"], out["b"][0]) and proposals["r0"][
        "b"
    ][0]["tokens"] == [7, 8, 9, 3, 4]
    assert proposals["r1"]["b"][0]["tokens"] == [6, 1, 1]
    a = proposals["r0"]["a"][0]
    assert (a["y"], a["drafts"], proposals["r0"]["x_full"]) == ([9], [3, 4], (1, 2, 3))
    assert torch.equal(a["a"], drafter.a[0, :2])
    assert steps["r0"][0]["y"] == [9] and steps["r1"][0]["drafts"] == [1, 1]
    assert torch.equal(steps["r1"][0]["b"], out["b"][1]) and "a" not in steps["r1"][0]
    assert torch.equal(steps["r0"][0]["t"], out["t"][0])  # the verifier's, every step
    assert harness.recording(drafter).proposals is None  # off: nothing kept


def test_a_step_records_t_always_and_a_sampling_rows_drafting_logits_as_q():
    """A group whose rule reads only t (Floor, SD) is recorded too; a sampling sd / scd group's drafting logits
    (under its method's name, e.g. DRAFTED) are recorded as q, [n, V] a row."""
    drafter = FakeProposer()
    t, q = torch.randn(2, 3, V), torch.randn(2, 2, V)
    harness.record(drafter, "steps")
    try:
        harness.recording(drafter).record_step(
            drafter, ["r0", "r1"], torch.tensor([[3, 4], [1, 1]]), {"t": t, DRAFTED: q}
        )
        steps = harness.recording(drafter).steps
    finally:
        harness.record(drafter, "steps", on=False)
    assert set(steps["r1"][0]) == {"step", "y", "drafts", "t", "q"}
    assert torch.equal(steps["r0"][0]["t"], t[0]) and torch.equal(
        steps["r1"][0]["q"], q[1]
    )


def test_a_prefill_chunk_vllm_discards_is_no_step():
    """A row in a prefill chunk that does not finish its prompt is sampled by vLLM and the sample thrown away
    (discard_request_mask): its t was read inside the prompt, so it is not recorded; the other row is."""
    drafter = FakeProposer()
    drafter.runner.discard_request_mask.np[:2] = [True, False]
    harness.record(drafter, "steps")
    try:
        harness.recording(drafter).record_step(
            drafter,
            ["r0", "r1"],
            torch.zeros(2, 0, dtype=torch.long),
            {"t": torch.randn(2, 1, V)},
        )
        steps = harness.recording(drafter).steps
    finally:
        harness.record(drafter, "steps", on=False)
    assert list(steps) == ["r1"] and steps["r1"][0]["drafts"] == []


@pytest.mark.parametrize(
    "keep, held",
    [(None, list(range(10))), (1, [9]), (3, [0, 8, 9]), (6, [0, 2, 4, 6, 8, 9])],
)
def test_a_steps_recording_holds_at_most_keep_steps_a_request_the_first_and_the_latest(
    keep, held
):
    """At real vocabularies an entry is megabytes: `keep` bounds the entries held per request to the latest and,
    before it, the steps at multiples of the smallest power-of-two stride leaving at most keep - 1 (step 0 among
    them); each entry names its step, and its logits are that step's."""
    drafter = FakeProposer()
    harness.record(drafter, "steps", keep=keep)
    try:
        for n in range(10):
            harness.recording(drafter).record_step(
                drafter,
                ["r0"],
                torch.tensor([[3, 4]]),
                {"t": torch.full((1, 3, V), float(n))},
            )
        steps = harness.recording(drafter).steps["r0"]
    finally:
        harness.record(drafter, "steps", on=False)
    assert [e["step"] for e in steps] == held
    assert [int(e["t"][0, 0]) for e in steps] == held
    with pytest.raises(ValueError, match="keep 0"):
        harness.record(drafter, "steps", keep=0)
