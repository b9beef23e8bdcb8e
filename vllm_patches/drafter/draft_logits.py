"""The drafter's x_full logits a, kept from the step that drafts to the step that verifies, in one buffer (and,
for a sd or scd request that samples, the x_comp drafting logits q its drafts were drawn from: draft_pick.py).

Each running asymspec request holds K+1 rows of V logits between two steps (a_1..a_K at the draft
positions, a_{K+1} for a fused bonus): max_num_seqs x (K+1) x V in the model dtype, about 0.4 GB for 256
requests at K = 4 with Qwen's 151,936-token vocabulary in bf16. The buffer is allocated when the drafter
loads, so vLLM's memory profile counts it, and a request takes a slot when it drafts and gives it back when
it finishes, fails or is preempted (a preempted request drafts again after it resumes). A running request the
scheduler merely skips for a step (no token budget left) keeps its slot: its drafts are still queued and the
step that schedules it verifies them against these logits.
"""

from __future__ import annotations

import torch

from asymspec_vl.core.errors import AsymSpecError

from .drafter_pass import to_device


class DraftLogitsFullError(AsymSpecError, RuntimeError):
    """More requests drafted in one step than the buffer has slots (max_num_seqs)."""


class DraftLogits:
    def __init__(
        self,
        num_slots: int,
        K: int,
        vocab_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        self.logits = torch.empty(
            num_slots, K + 1, vocab_size, dtype=dtype, device=device
        )  # [S, K+1, V]
        self.free = list(range(num_slots - 1, -1, -1))
        self.slots: dict[str, int] = {}

    def slot(self, req_id: str) -> int:
        if req_id not in self.slots:
            if not self.free:
                raise DraftLogitsFullError(
                    f"no free draft-logits slot of {self.logits.shape[0]}"
                )
            self.slots[req_id] = self.free.pop()
        return self.slots[req_id]

    def store(self, req_id: str, a: torch.Tensor) -> None:
        """a: [n, V] logits at the draft positions (n <= K + 1)."""
        self.logits[self.slot(req_id), : a.shape[0]] = a

    def put(self, req_id: str, k: int, x: torch.Tensor) -> None:
        """x: [V] the logits of draft position k (0-based)."""
        self.logits[self.slot(req_id), k] = x

    def store_rows(self, req_ids: list[str], a: torch.Tensor, n: list[int]) -> None:
        """a: [R, >= max(n), V], row r's first n[r] rows its logits at the draft positions: one copy when every
        row stores as many."""
        if len(set(n)) == 1:
            slots = to_device(
                torch.tensor([self.slot(r) for r in req_ids]), self.logits.device
            )  # no wait on CUDA
            self.logits[slots, : n[0]] = a[:, : n[0]]
            return
        for r, (req_id, rows) in enumerate(zip(req_ids, n)):
            self.store(req_id, a[r, :rows])

    def gather(self, req_ids: list[str], n: int) -> torch.Tensor:
        """The first n rows of each request's logits. -> [len(req_ids), n, V]."""
        index = torch.tensor(
            [self.slots[r] for r in req_ids], device=self.logits.device
        )
        return self.logits[index, :n]

    def release(self, req_id: str) -> None:
        slot = self.slots.pop(req_id, None)
        if slot is not None:
            self.free.append(slot)
