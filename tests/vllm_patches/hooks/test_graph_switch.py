"""vllm_patches.hooks.graph_switch on a stand-in proposer (the doctor's switch of the drafter's compiled passes):
what it reports, switching off and back on, the pass counts it resets and keeps, and the refusal to switch on a
drafter loaded eagerly."""

import types

import pytest
import torch
from vllm.config import CUDAGraphMode

from vllm_patches.hooks import graph_switch


class CompiledPart(torch.nn.Module):
    do_not_compile = False  # a @support_torch_compile submodule vLLM compiles


class Graphs:
    """DrafterGraphs' surface the switch reads: enabled, enforce_eager, model, dispatcher, replays, forward."""

    def __init__(self, enabled=True, enforce_eager=False, compiled=True, mode=None):
        self.enabled, self.enforce_eager = enabled, enforce_eager
        self.model = torch.nn.Sequential(
            CompiledPart() if compiled else torch.nn.Identity()
        )
        self.dispatcher = types.SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.PIECEWISE if mode is None else mode,
            cudagraph_keys={  # mode -> the batch descriptors captured at it
                "piecewise": [types.SimpleNamespace(num_tokens=n) for n in (8, 1, 4)],
                "full": [types.SimpleNamespace(num_tokens=n) for n in (2, 8)],
            },
        )
        self.forwards = []

    def replays(self, num_tokens: int) -> bool:
        return num_tokens <= 4  # graphs captured up to 4 tokens

    def forward(self, token_ids, *args, **kwargs):
        self.forwards.append((token_ids.shape[0], args, kwargs))
        return "logits"


def proposer(**kw):
    return types.SimpleNamespace(graphs=Graphs(**kw))


def test_reporting_changes_nothing():
    p = proposer()
    assert graph_switch.switch(p) == {
        "compiled": True,
        "cudagraph_mode": "PIECEWISE",
        "capture_sizes": [1, 2, 4, 8],
        "passes": {"compiled": 0, "replayed": 0},
        "graphs": True,
    }
    assert p.graphs.enabled and "forward" not in vars(p.graphs)


def test_switching_off_and_on_counts_the_passes_since_the_switch():
    p = proposer()
    off = graph_switch.switch(p, on=False)
    assert off["compiled"] is False and p.graphs.enabled is False
    assert (
        p.graphs.forward(torch.zeros(3), 1, k=2) == "logits"
    )  # the class's forward still runs
    assert p.graphs.forwards == [(3, (1,), {"k": 2})]
    on = graph_switch.switch(p, on=True)  # the switch resets the counts
    assert on["compiled"] is True and on["passes"] == {"compiled": 0, "replayed": 0}
    for n in (2, 16, 4):
        p.graphs.forward(torch.zeros(n))
    assert graph_switch.switch(p)["passes"] == {"compiled": 3, "replayed": 2}
    assert graph_switch.switch(p)["passes"] == {
        "compiled": 3,
        "replayed": 2,
    }  # a report keeps them


def test_a_compiled_drafter_switched_off_may_be_switched_back_on():
    p = proposer(enabled=False)  # switched off earlier; compiled at load
    assert graph_switch.switch(p, on=True)["compiled"] is True


@pytest.mark.parametrize(
    "kw", [{"enforce_eager": True}, {"compiled": False}, {"mode": CUDAGraphMode.NONE}]
)
def test_a_drafter_loaded_eagerly_cannot_be_switched_on(kw):
    p = proposer(enabled=False, **kw)
    if (
        kw.get("mode") is CUDAGraphMode.NONE
    ):  # compiled, never replayed: it switches, graphs False
        report = graph_switch.switch(p, on=True)
        assert report["compiled"] is True and report["graphs"] is False
        return
    with pytest.raises(RuntimeError, match="loaded eagerly"):
        graph_switch.switch(p, on=True)
    assert p.graphs.enabled is False
    assert (
        graph_switch.switch(p, on=False)["compiled"] is False
    )  # off is always allowed
