"""Recorded drafter logits of the first few proposals of each request (probe.py; `asymspec-vl doctor`), each with
the tokens it was computed on, so that a caller can recompute them with transformers:
  a  on x_full at the draft positions: the drafter read x_full's prompt + y, then d_1 .. d_{K-1}
  b  on x_comp at the verified positions: the drafter read the verifier's tokens (x_comp + y) and the drafts
Off (the proposer's `capture` is None) unless a caller switches it on; it then holds MAX_PROPOSALS of each per
request, on the host, in float32.
"""

from __future__ import annotations

import torch

MAX_PROPOSALS = 4  # per request and view


class LogitCapture:
    def __init__(self):
        self.rows: dict[str, dict] = {}  # req_id -> {"x_full", "view", "a": [...], "b": [...]}

    def _row(self, req_id: str) -> dict:
        return self.rows.setdefault(req_id, {"x_full": None, "view": None, "a": [], "b": []})

    def record_a(self, req_id: str, state, y: list[int], a: torch.Tensor) -> None:
        """a: [K, V] of the proposal state.drafts, drafted after the x_full prompt + y."""
        row = self._row(req_id)
        row["x_full"], row["view"] = tuple(state.request.x_full), tuple(state.full.prompt)
        if len(row["a"]) < MAX_PROPOSALS:
            row["a"].append({"y": list(y), "drafts": list(state.drafts), "a": a.float().cpu()})

    def record_b(self, runner, req_ids: list[str], drafts: torch.Tensor, b: torch.Tensor) -> None:
        """b: [G, n+1, V] at the verified positions of rows req_ids (drafts [G, n]); each row's tokens are its
        prompt and outputs so far (the verifier's stream: x_comp + y) and the drafts."""
        for req_id, row_drafts, row_b in zip(req_ids, drafts.tolist(), b):
            row = self._row(req_id)
            if len(row["b"]) < MAX_PROPOSALS:
                request = runner.requests[req_id]
                tokens = list(request.prompt_token_ids) + list(request.output_token_ids) + row_drafts
                row["b"].append({"tokens": tokens, "b": row_b.float().cpu()})

    def packed(self) -> dict:
        """The recorded rows with their tensors packed for an RPC result (msgpack carries no tensors)."""
        from .request_args import pack_tensor

        return {req_id: {**row, "a": [{**p, "a": pack_tensor(p["a"])} for p in row["a"]],
                         "b": [{**p, "b": pack_tensor(p["b"])} for p in row["b"]]}
                for req_id, row in self.rows.items()}
