"""What an asymspec engine's model runner keeps beside vLLM's, in one object attached once (runner_patch.init)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..probes.phase_timing import PhaseTimer

RUNNER_ATTR = "asymspec"  # GPUModelRunner attribute holding its RunnerState (asymspec engines only)


@dataclass
class RunnerState:
    live: bool = False  # inside execute_model (not in dummy or profiling runs)
    logits_indices: torch.Tensor | None = (
        None  # [num_logits] this step's token index of every logits row
    )
    timer: PhaseTimer | None = (
        None  # per-phase timing, while a benchmark has it on (probe.start_timing)
    )


def runner_state(runner) -> RunnerState | None:
    """The runner's RunnerState; None for a runner of any other configuration."""
    return getattr(runner, RUNNER_ATTR, None)
