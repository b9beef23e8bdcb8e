"""Optional wall-clock accounting of an asymspec engine step, by phase (benchmarks; off by default).

  verifier   the verifier's forward on [pending, d_1..d_K]
  base_pass  the drafter's x_comp-view pass on the same tokens (logits b: the base pass of delta = a - b)
  gate       the sampler: b logits at the verified rows, the gate / fusion decision
  draft      committing, the x_full passes (K drafts, the vision tower on a request's first step)
On GPU each phase is bracketed by device synchronisation, so enabling it slows the engine slightly.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

import torch

PHASES = ("verifier", "base_pass", "gate", "draft")


class PhaseTimer:
    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.steps = 0

    @contextmanager
    def phase(self, name: str):
        _sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            _sync()
            self.seconds[name] += time.perf_counter() - start

    def report(self) -> dict:
        return {"steps": self.steps, "seconds": dict(self.seconds)}


def timed(runner, name: str):
    timer = getattr(
        getattr(runner, "asymspec", None), "timer", None
    )  # runner_state.RunnerState's
    return timer.phase(name) if timer is not None else nullcontext()


def _sync() -> None:
    """Wait for the device where CUDA runs. is_initialized is a flag read; is_available, before CUDA is initialised
    (the CPU build), asks the driver for its device count on every call (~0.6 ms through NVML here), which each
    phase's closing bracket would add to that phase."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
