"""Which drafter failures fail one request and which fail the engine, so tensor-parallel ranks never diverge.

Under tensor parallelism every rank runs the drafter's passes in lockstep: the vision tower and every
forward contain collectives (all-reduce, all-gather). A failure can be
  deterministic  the same on every rank: a malformed request, a too-long prompt, a full x_full pool (host-side
                 checks on replicated inputs and replicated bookkeeping). It fails that request on every rank
                 and the engine goes on;
  rank-local     a device error on one rank only (an out-of-memory in the vision tower, say). With one rank it
                 fails that request alone; with several it cannot: the other ranks are already waiting in a
                 collective the failed rank will never join, so catching it on one rank would pair their next
                 collectives with the wrong partners (silent corruption) or hang. It propagates instead: the
                 worker raises, vLLM's executor fails the engine loudly and stops every worker.
                 vLLM only hears of an exception on its output rank (the others log it and wait for the next
                 call), so a rank that hits one in a drafter pass ends its own process
                 (`stop_rank_on_error`): vLLM's worker monitor then shuts the engine down and every client gets
                 an error, where waiting would hang.
`check_ranks_agree` is the safety net: each step, ranks compare which requests they failed (one all-gather of
two integers, only when tensor parallelism is on) and raise instead of diverging. It gathers on the group's
host-side (gloo) process group, never through the group's device communicator: vLLM's CPU shared-memory
communicator (`_CPUSHMDistributed`, chosen on AVX-512 CPUs) carries no int64, and on a GPU the device
round trip would cost a sync.
"""

from __future__ import annotations

import logging
import os
import sys
import zlib
from contextlib import contextmanager

import torch

from asymspec_vl.core.errors import AsymSpecError

logger = logging.getLogger(__name__)
EXIT_CODE = 70  # EX_SOFTWARE: an internal error ended the worker


class RanksDisagreeError(RuntimeError):
    """Tensor-parallel ranks failed different requests: the engine stops rather than diverge."""


def request_errors(world_size: int) -> tuple[type[BaseException], ...]:
    """Exceptions of a device pass (moving pixels, the vision tower) that fail only the request: a rank-local
    device error is one of them only without tensor parallelism."""
    return (
        (AsymSpecError, RuntimeError, ValueError)
        if world_size == 1
        else (AsymSpecError,)
    )


def failure_digest(req_ids) -> torch.Tensor:
    """[2] int64: how many requests failed, and a checksum of their ids (order-free)."""
    checksum = sum(zlib.crc32(r.encode()) for r in req_ids) % (1 << 62)
    return torch.tensor([len(req_ids), checksum], dtype=torch.int64)


def check_ranks_agree(group, failed_req_ids) -> None:
    """Raise RanksDisagreeError unless every rank of `group` (a vLLM GroupCoordinator) failed the same
    requests this step. No-op for a single rank."""
    if group is None or group.world_size == 1:
        return
    mine = failure_digest(failed_req_ids)
    every = [torch.empty_like(mine) for _ in range(group.world_size)]
    torch.distributed.all_gather(
        every, mine, group=group.cpu_group
    )  # gloo: int64 on every platform
    every = torch.stack(every)  # [world_size, 2]
    if not bool((every == every[0]).all()):
        raise RanksDisagreeError(
            f"asymspec: tensor-parallel ranks failed different requests this step ((count, checksum) per rank: "
            f"{every.tolist()}); rank {group.rank_in_group} failed {sorted(failed_req_ids)}. Stopping the engine "
            "instead of letting the ranks diverge."
        )


@contextmanager
def stop_rank_on_error(world_size: int, what: str):
    """Around a drafter pass with collectives: with tensor parallelism, an exception ends this worker process
    (see the module docstring); without, it propagates as usual."""
    try:
        yield
    except Exception as e:
        if world_size == 1:
            raise
        logger.critical(
            "asymspec: %s failed on this tensor-parallel rank (%s: %s); stopping the worker so that "
            "vLLM stops the engine instead of the other ranks waiting in a collective",
            what,
            type(e).__name__,
            e,
            exc_info=True,
        )
        sys.stderr.flush()
        os._exit(EXIT_CODE)
