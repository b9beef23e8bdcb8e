"""The scheduler's ledger of the drafter's x_full KV pool: which running requests hold how many blocks of it.

The workers' pool (drafter/full_view_pool.FullViewPool) hands out blocks as a request's x_full view grows; the scheduler
admits a new request only when the blocks its whole view can grow to (prompt + max_tokens + K + 1, counted in
the scheduler's block size) fit beside what the running ones may come to hold, so a running request never
finds the pool full. Invariants (tests/vllm_patches/requests/test_pool_ledger.py):
  - the reserved blocks never exceed `usable` (admission holds back what does not fit);
  - a request is reserved once, from the step that schedules it until it is freed (finished, aborted);
  - `peak` is the high-water mark of the reserved blocks.
What it does not know: vLLM's classes (scheduler_patch.py adapts them), the pool's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PoolLedger:
    usable: int  # blocks of the pool, in the scheduler's block size (full_view_pool.full_view_capacity)
    block_size: int  # the scheduler's block size
    reserved: dict[str, int] = field(
        default_factory=dict
    )  # req_id -> blocks of a running request
    peak: int = 0  # high-water mark of sum(reserved)

    @property
    def free(self) -> int:
        return self.usable - sum(self.reserved.values())

    def could_ever_fit(self, blocks: int) -> bool:
        """Whether a request that needs `blocks` fits the empty pool (else it can never be admitted)."""
        return blocks <= self.usable

    def held_back(self, waiting: list[tuple[str, int]]) -> set[str]:
        """Of the waiting requests (req_id, blocks needed), in queue order, those that do not fit what is free
        after the ones before them: the rest may be scheduled this step. Requests already reserved (resumed
        after a preemption) and ones needing no blocks are never held."""
        free, held = self.free, set()
        for req_id, need in waiting:
            if req_id in self.reserved or not need:
                continue
            if need <= free:
                free -= need
            else:
                held.add(req_id)
        return held

    def admit(self, req_id: str, blocks: int) -> None:
        """A request the scheduler scheduled for the first time holds its blocks until it is released."""
        if blocks:
            self.reserved[req_id] = blocks
        self.peak = max(self.peak, sum(self.reserved.values()))

    def release(self, req_id: str) -> None:
        self.reserved.pop(req_id, None)
