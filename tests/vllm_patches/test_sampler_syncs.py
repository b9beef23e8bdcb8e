"""The host syncs of one sampler step (vllm_patches.sampler.sample), counted on the CPU (issue 44 item 3): every call
that waits for the device on a GPU is counted by a TorchFunctionMode: a read of a device tensor's values on the
host (item, tolist, cpu, numpy, bool / int / float of a tensor, nonzero, masked_select, a boolean-mask index) and a
blocking copy (torch.tensor(..., device=...), Tensor.to(device) without non_blocking=True: on a GPU such a copy
synchronises its stream, host to device as device to host). Which tensors live on the device is tracked by a
tensor subclass (Dev): the step's logits, their indices and the proposer's logits are Dev, so is whatever a copy
to a device or an op on a Dev tensor makes; a tensor built from Python lists on the host is not, and reading it
costs nothing. The step of test_sampler_memory.build_step: 7 rows in
two groups (the rule tested and a greedy SD group), min_tokens holding a stop token, with and without logprobs.
The counts are the sampler's after issue 44 (docs/vllm-gpu-reading.md lists them with the counts before): a new
sync fails this test, and so does one removed (then lower the count here)."""

import collections
import contextlib
import dataclasses
import importlib.util
import traceback
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from vllm.v1.sample.sampler import Sampler

from vllm_patches import sampler


def _sibling(name: str):
    """A test module beside this one (pytest imports tests with --import-mode=importlib: no sys.path entry)."""
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).with_name(f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_step = _sibling(
    "test_sampler_memory"
).build_step  # the step the chunking tests decide
READS = {
    "item",
    "tolist",
    "cpu",
    "numpy",
    "__bool__",
    "__int__",
    "__float__",
    "nonzero",
    "masked_select",
}


def _is_bool_mask(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


def _blocking_copy(name: str, args, kwargs) -> bool:
    if name in ("tensor", "as_tensor"):
        return kwargs.get("device") is not None
    if name == "to":
        moves = any(isinstance(a, (str, torch.device)) for a in args[1:]) or (
            "device" in kwargs
        )
        return moves and not kwargs.get("non_blocking", False)
    return False


def _moves(name: str, args, kwargs) -> bool:
    """A copy to a device, blocking or not."""
    if name in ("tensor", "as_tensor"):
        return kwargs.get("device") is not None
    return name == "to" and (
        any(isinstance(a, (str, torch.device)) for a in args[1:]) or "device" in kwargs
    )


class Dev(torch.Tensor):
    """A tensor that lives on the device (on a GPU: reading it on the host waits for the device)."""


def _on_device(args) -> bool:
    return any(isinstance(a, Dev) for a in args if isinstance(a, torch.Tensor))


class SyncCount(TorchFunctionMode):
    """Counts the calls that sync with the host on a GPU, by kind and (file, line) of our code."""

    def __init__(self):
        super().__init__()
        self.where = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        copy = _blocking_copy(name, args, kwargs) or _moves(name, args, kwargs)
        kind = (
            name
            if name in READS and _on_device(args[:1])
            else "bool-mask index"
            if name in ("__getitem__", "__setitem__")
            and _is_bool_mask(args[1])
            and _on_device(
                (args[0], *(args[1] if isinstance(args[1], tuple) else (args[1],)))
            )
            else "blocking copy"
            if _blocking_copy(name, args, kwargs)
            else None
        )
        if kind is not None:
            ours = [
                f
                for f in traceback.extract_stack()[:-1]
                if "site-packages" not in f.filename and f.filename != __file__
            ]
            where = ours[-1] if ours else None
            self.where[
                (kind, where and f"{where.filename.split('/')[-1]}:{where.lineno}")
            ] += 1
        out = func(*args, **kwargs)
        if copy and isinstance(out, torch.Tensor) and not isinstance(out, Dev):
            out = out.as_subclass(Dev)  # now on the device
        return out


def step_syncs(method: str, samples: bool, logprobs: bool) -> tuple[int, dict]:
    _run(
        method, samples, logprobs, None
    )  # vLLM's compiled logprobs helpers compile outside the counter
    count = SyncCount()
    _run(method, samples, logprobs, count)
    return sum(count.where.values()), dict(count.where)


def _run(method: str, samples: bool, logprobs: bool, count) -> None:
    rows, proposer, batch, logits, meta = build_step(method, samples, None)
    logits = logits.as_subclass(Dev)  # [num_tokens, V] the verifier's, on the device
    proposer.store = {
        name: {r: x.as_subclass(Dev) for r, x in by_row.items()}
        for name, by_row in proposer.store.items()
    }
    meta.draft_token_ids = meta.draft_token_ids.as_subclass(Dev)  # [num_drafts]
    if not logprobs:
        batch = dataclasses.replace(batch, num_logprobs={}, max_num_logprobs=None)
    with count or contextlib.nullcontext():
        sampler.sample(
            proposer,
            batch,
            logits,
            meta,
            torch.arange(len(logits)).as_subclass(Dev),
            None,
            Sampler("raw_logprobs"),
        )


# (method, samples, logprobs) -> host syncs of the step (two groups: the rule tested and greedy SD). Per step 2:
# the drafts' read (spec_meta.draft_token_ids.tolist()) and the output's copy (out.to(logits.device)). Per group
# 1: the committed tokens' read (StepOutcome.committed: num_accepted and token stacked, one tolist); with logprobs
# +1 (step_scores reads num_accepted for each row's distribution names); greedy AsymSpec +1 (the fused kernel's
# check of the draft ids, core/kernels/dispatch.py). Before issue 44: 23, 22, 19, 19, 16, 50, 49, 46.
EXPECTED = {
    ("asymspec", False, False): 5,
    ("asymspec", True, False): 4,
    ("sd", True, False): 4,
    ("scd", False, False): 4,
    ("floor", False, False): 4,
    ("asymspec", False, True): 7,
    ("asymspec", True, True): 6,
    ("scd", True, True): 6,
}


@pytest.mark.parametrize(("method", "samples", "logprobs"), list(EXPECTED))
def test_a_steps_host_syncs_are_the_counted_ones(method, samples, logprobs):
    total, where = step_syncs(method, samples, logprobs)
    assert total == EXPECTED[(method, samples, logprobs)], where


def test_the_counter_sees_a_new_sync():
    """A tolist of a device tensor, a bool of one in an `if`, a blocking copy and a mask index are each counted."""
    x = torch.arange(6.0).as_subclass(Dev)
    with SyncCount() as count:
        x.tolist()
        if (x > 3).any():
            x.to("cpu")
        x[x > 2]
        x.to("cpu", non_blocking=True)  # not counted
        torch.tensor([1, 2]).tolist()  # a host tensor: not counted
    kinds = collections.Counter(k for k, _ in count.where.elements())
    assert kinds == {
        "tolist": 1,
        "__bool__": 1,
        "blocking copy": 1,
        "bool-mask index": 1,
    }
