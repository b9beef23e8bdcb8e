"""vLLM's data-parallel coordinator start: its failure named (DataParallelStartError), its wait lengthened on ask.

vLLM 0.19 starts a coordinator process for data parallelism behind one API server (v1/engine/utils.py
launch_core_engines) and waits a fixed 30 s for it to report its addresses (v1/engine/coordinator.py,
DPCoordinator._wait_for_zmq_addrs), raising a RuntimeError that names neither cause nor fix. The process imports
vLLM and torch before it reports, which on a loaded machine takes longer. Hooked:
  DPCoordinator._wait_for_zmq_addrs   first waits up to ASYMSPEC_VL_DP_COORDINATOR_WAIT_S more seconds (unset: none,
                                      vLLM's wait alone), then vLLM's own wait; its failure becomes a
                                      DataParallelStartError saying whether the process was still starting (the
                                      limit) or had exited (its own error is logged above), and what to do.
"""

from __future__ import annotations

import multiprocessing.connection
import os

from asymspec_vl.core.errors import AsymSpecError

from ._patching import install

WAIT_ENV = "ASYMSPEC_VL_DP_COORDINATOR_WAIT_S"
VLLM_WAIT_S = 30  # vLLM's fixed limit (v1/engine/coordinator.py)


class DataParallelStartError(AsymSpecError, RuntimeError):
    """vLLM's data-parallel coordinator process did not start; the message names why and what to do."""


def patch_dp_coordinator() -> None:
    from vllm.v1.engine.coordinator import DPCoordinator  # lazy: loads vLLM

    install(DPCoordinator, "_wait_for_zmq_addrs", wait_for_zmq_addrs)


def extra_wait_s() -> float:
    """Seconds to wait before vLLM's own 30 s (WAIT_ENV; unset or empty: 0)."""
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise DataParallelStartError(
            f"{WAIT_ENV}={text!r} is invalid: expected a number of seconds >= 0"
        )
    return value


def wait_for_zmq_addrs(original, coordinator, zmq_addr_pipe):
    extra = extra_wait_s()
    if extra:
        # returns as soon as the addresses arrive or the process exits; vLLM's wait then reads them at once
        multiprocessing.connection.wait(
            [zmq_addr_pipe, coordinator.proc.sentinel], timeout=extra
        )
    try:
        return original(coordinator, zmq_addr_pipe)
    except RuntimeError as e:
        raise DataParallelStartError(
            start_failure(coordinator.proc, VLLM_WAIT_S + extra)
        ) from e


def start_failure(proc, waited_s: float) -> str:
    """The message for a coordinator process that did not report its addresses within waited_s seconds."""
    if proc.is_alive():
        return (
            f"vLLM's data-parallel coordinator process (pid {proc.pid}) did not report its addresses within "
            f"{waited_s:g} s (vLLM's fixed limit is {VLLM_WAIT_S} s, v1/engine/coordinator.py): it was still "
            "starting, importing vLLM and torch, which takes longer than that on a loaded machine. Start "
            f"again with fewer processes on the machine's CPUs, or give it more time: {WAIT_ENV}=120 (seconds "
            f"waited before vLLM's {VLLM_WAIT_S} s)."
        )
    return (
        f"vLLM's data-parallel coordinator process (pid {proc.pid}) exited (code {proc.exitcode}) before "
        "reporting its addresses: its own error is in the log above. Fix that and start again; without a "
        "coordinator, run one server per GPU group behind a router (docs/serve.md, 'More than one GPU or "
        "machine')."
    )
