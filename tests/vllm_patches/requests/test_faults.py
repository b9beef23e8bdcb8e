"""vllm_patches.requests.faults on small stand-ins: tensor-parallel ranks compare their failed requests over any
communicator."""

import multiprocessing as mp
import os
import tempfile

import pytest
import torch


class ShmLikeGroup:
    """A GroupCoordinator stand-in whose device communicator refuses int64, as vLLM's CPU shared-memory one
    does on AVX-512 CPUs (`shm_all_gather_impl` not implemented for 'Long'); its cpu_group is real gloo."""

    def __init__(self, rank: int, world_size: int):
        self.rank_in_group, self.world_size, self.device = (
            rank,
            world_size,
            torch.device("cpu"),
        )
        self.cpu_group = torch.distributed.group.WORLD

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        if x.dtype == torch.int64:
            raise NotImplementedError(
                "\"shm_all_gather_impl\" not implemented for 'Long'"
            )
        out = [torch.empty_like(x) for _ in range(self.world_size)]
        torch.distributed.all_gather(out, x)
        return torch.cat(out, dim)


CASES = [  # (rank 0 failed, rank 1 failed, the ranks agree)
    (["a", "b"], ["b", "a"], True),  # the same set, any order
    ([], [], True),
    (["a", "b"], ["a"], False),
    (["a"], ["c"], False),
    ([], ["x"], False),
]


def _rank(rank: int, init_file: str, results) -> None:
    from vllm_patches.requests.faults import RanksDisagreeError, check_ranks_agree

    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2
    )
    group = ShmLikeGroup(rank, 2)
    outcome = []
    try:
        for case in CASES:
            try:
                check_ranks_agree(group, case[rank])
                outcome.append(True)
            except RanksDisagreeError:
                outcome.append(False)
    except Exception as e:  # noqa: BLE001 - reported to the test
        outcome.append(f"{type(e).__name__}: {e}")
    finally:
        results.put((rank, outcome))
        torch.distributed.destroy_process_group()


def test_ranks_agree_over_a_communicator_without_int64():
    """Two gloo ranks whose device communicator refuses int64 (the CPU SHM one on AVX-512): the same failed
    requests (in any order) pass, different ones raise RanksDisagreeError on both ranks; the digest never goes
    through that communicator."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        procs = [ctx.Process(target=_rank, args=(r, init, results)) for r in range(2)]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
    want = [agree for _, _, agree in CASES]
    assert got == {0: want, 1: want}, got


def test_a_single_rank_never_gathers():
    from vllm_patches.requests.faults import check_ranks_agree

    class One:
        world_size = 1

        def __getattr__(self, name):
            pytest.fail(f"a single rank read {name}")

    check_ranks_agree(One(), ["a"])
    check_ranks_agree(None, ["a"])
