"""vllm_patches.drafter.draft_logits on small stand-ins: slots of the drafter's logits a, who takes them, who gives
them back."""

import types

import pytest
import torch

from vllm_patches.drafter.draft_logits import DraftLogits, DraftLogitsFullError
from vllm_patches.drafter.full_view import FullView


def buffer(num_slots: int, K: int = 2, V: int = 5) -> DraftLogits:
    return DraftLogits(num_slots, K, V, torch.float32, torch.device("cpu"))


def test_every_slot_is_handed_out_and_no_more():
    """max_num_seqs slots serve max_num_seqs requests, slot 0 included; one more request is a typed error."""
    logits = buffer(3)
    assert sorted(logits.slot(r) for r in "abc") == [0, 1, 2]
    with pytest.raises(DraftLogitsFullError):
        logits.slot("d")
    one = buffer(1)
    assert one.slot("a") == 0


def test_stored_logits_come_back_per_request_and_a_released_slot_is_reused():
    logits = buffer(2)
    a, b = torch.arange(15.0).view(3, 5), -torch.arange(10.0).view(2, 5)
    logits.store("a", a)
    logits.store("b", b)
    got = logits.gather(["b", "a"], 2)  # [2, n, V]
    assert torch.equal(got[0], b) and torch.equal(got[1], a[:2])
    logits.release("a")
    logits.release("a")  # twice: harmless
    logits.store("c", a)
    assert logits.slots["c"] != logits.slots["b"] and torch.equal(
        logits.gather(["b"], 2)[0], b
    )


def test_rows_stored_together_come_back_as_stored_one_by_one():
    """A step's a in one copy (every row as many passes) or row by row (rows of fewer passes): each request reads
    back its own first n rows, in the slots it would have taken one at a time."""
    a = torch.arange(2 * 3 * 5.0).view(2, 3, 5)  # [R, passes, V]
    together, alone = buffer(4), buffer(4)
    together.store_rows(["x", "y"], a, [3, 3])
    for r, req_id in enumerate("xy"):
        alone.store(req_id, a[r])
    assert together.slots == alone.slots and torch.equal(
        together.gather(["y", "x"], 3), alone.gather(["y", "x"], 3)
    )
    mixed = buffer(4)
    mixed.store_rows(["x", "y"], a, [3, 2])
    assert torch.equal(mixed.gather(["x"], 3)[0], a[0]) and torch.equal(
        mixed.gather(["y"], 2)[0], a[1, :2]
    )


def drafter_with(logits: DraftLogits):
    from vllm_patches.drafter.proposer import AsymSpecProposer
    from vllm_patches.requests.rows import RowState

    drafter = AsymSpecProposer.__new__(AsymSpecProposer)
    drafter.full = FullView(None, logits)
    states = {r: RowState(None, 2) for r in "ab"}
    drafter.row = states.__getitem__
    drafter.runner = types.SimpleNamespace(requests={})
    return drafter


def test_a_request_skipped_for_a_step_keeps_its_draft_logits():
    """Finding 3: b drafted last step, then the token budget skips it for one step (it is not in this batch):
    its drafts are still queued, so the step that schedules it again reads its stored a (the old keep_only
    released its slot and gather raised KeyError, which killed the engine)."""
    logits = buffer(4)
    logits.store("a", torch.zeros(3, 5))
    logits.store("b", torch.ones(3, 5))
    drafter = drafter_with(logits)
    drafter.plan(
        ["a"], [[]]
    )  # a step of "a" alone (a prefill chunk: nothing committed)
    assert torch.equal(logits.gather(["b"], 3)[0], torch.ones(3, 5))


def test_preempted_and_finished_requests_give_their_slots_back():
    """Preemption drops a request's drafts (vLLM clears its spec tokens): its slot is freed as the runner
    learns of it, as a finished request's is."""
    from vllm_patches.hooks import runner_patch

    logits = buffer(3)
    for r in "abc":
        logits.store(r, torch.zeros(1, 5))
    released = []

    def forget(req_ids):
        for r in req_ids:
            released.append(r)
            logits.release(r)

    registry = types.SimpleNamespace(
        forget=forget,
        note_resumed=lambda cached, requests: None,
        drop_drafts=lambda req_id: None,
    )
    from vllm_patches.drafter.proposer import AsymSpecProposer

    drafter = AsymSpecProposer.__new__(AsymSpecProposer)
    drafter.registry, drafter.full = (
        registry,
        types.SimpleNamespace(draft_logits=logits),
    )
    runner = drafter.runner = types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        drafter=drafter,
        requests={},
    )
    out = types.SimpleNamespace(
        finished_req_ids={"a"},
        preempted_req_ids={"b"},
        scheduled_cached_reqs=types.SimpleNamespace(resumed_req_ids=set()),
    )
    runner_patch.update_states(lambda runner, so: "updated", runner, out)
    assert set(logits.slots) == {"c"} and released == ["a"]
    logits.slot("d"), logits.slot("e")  # the freed slots serve new requests
    assert len(logits.free) == 0
