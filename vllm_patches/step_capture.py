"""The probe's per-step record on a worker (probe.capture_step_logits): at every verification step of a request
whose rule reads the drafter's logits, what the rule read (a, b) and the tokens they belong to.

One entry per step and request: y (the committed output before the step, Algorithm 1's y), the drafts it
verifies (d_1..d_n) and the logits, float32 on the host:
  b  [n+1, V]  the drafter on x_comp + y + d_1..d_j, j = 0..n (the verified positions)
  a  [m, V]    the drafter on x_full + y + d_1..d_{j-1}, j = 1..m (m = n, or n+1 for a fused bonus)
A test recomputes both with transformers' drafter on exactly those tokens: a KV block that another request
overwrote, a stale position or a wrong view changes these logits even where the argmax (the tokens) absorbs
it. Off unless a probe turns it on: the copies to the host wait for the device.
"""

from __future__ import annotations

import torch


class StepCapture:
    def __init__(self):
        self.steps: dict[str, list[dict]] = {}  # req_id -> one entry per verification step

    def record(self, proposer, requests: dict, req_ids: list[str], drafts: list[list[int]],
               logits: dict[str, torch.Tensor]) -> None:
        """logits: what _logits gathered for these rows (t [G, n+1, V], and a, b where the rule reads them)."""
        read = [name for name in ("a", "b") if name in logits]
        if not read:
            return
        host = {name: logits[name].float().cpu() for name in read}  # [G, *, V]
        for j, (req_id, row_drafts) in enumerate(zip(req_ids, drafts)):
            y = proposer.row(req_id).committed(requests[req_id].output_token_ids)
            entry = {"y": [int(t) for t in y], "drafts": [int(d) for d in row_drafts]}
            entry.update({name: host[name][j].clone() for name in read})
            self.steps.setdefault(req_id, []).append(entry)
