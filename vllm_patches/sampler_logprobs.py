"""The logprobs of an asymspec engine's step in vLLM's LogprobsTensors, computed a chunk of rows at a time.

The layout is the rejection sampler's: [num_reqs * W] rows (W = max drafts + 1), row-major over the output, rows
past a row's tokens filtered out by vLLM. Position j of batch row i reads the raw scores its token was chosen from
at logits row first[i] + j (clamped to the row's last): t, or, where a row that its method's rule decided and that
asks for logprobs committed a token, core/logprobs.py's step_scores (a, the fused scores, SCD's contrastive target;
across a map restricted to the shared set). Values: log-softmax of those scores (vLLM's default logprobs_mode
raw_logprobs; raw_logits returns the scores themselves), with vLLM's Sampler's own compute_logprobs and
gather_logprobs. The sampler hands each chunk of a group right after its rule decided it (its logits are freed with
the chunk: the step's memory stays bounded, core/row_chunks.py); the rows no rule decided (hidden tokens, vLLM's
own sampler's rows) are read from t at the end. Every value is a function of its own row, so the chunks give
exactly one pass's tensors.
"""

from __future__ import annotations

import torch

from asymspec_vl.core import row_chunks
from asymspec_vl.core.logprobs import step_scores


class StepLogprobs:
    def __init__(
        self, batch, vllm_sampler, logits: torch.Tensor, first: list[int], width: int
    ):
        """batch: the sampler's StepBatch (num_logprobs, max_num_logprobs); vllm_sampler: vLLM's Sampler
        (logprobs_mode, compute_logprobs, gather_logprobs); logits [num_tokens, V] the verifier's; first: each
        row's first logits row (and the end); width: W."""
        self.batch, self.vllm_sampler, self.logits = batch, vllm_sampler, logits
        self.width, self.k = width, batch.max_num_logprobs
        last = torch.tensor(first[1:]) - 1  # [B] each row's last logits row
        self.index = torch.minimum(
            torch.tensor(first[:-1])[:, None] + torch.arange(width), last[:, None]
        )  # [B, W] the logits row of each position
        self.pieces: list = []  # (positions [c * W], LogprobsTensors of them)
        self.done: set[int] = set()

    def asking(self, index: list[int]) -> list[int]:
        """The places g in `index` (batch rows) whose row asks for logprobs."""
        return [
            g
            for g, i in enumerate(index)
            if self.batch.req_ids[i] in self.batch.num_logprobs
        ]

    def add(
        self,
        index: list[int],
        out: torch.Tensor,
        decided=None,
    ) -> None:
        """The logprobs of the batch rows `index`, whose tokens in out [B, W] (-1 past a row's tokens, read as
        token 0 as vLLM's) are final. decided: (method, cfg, logits by name, outcome, number of drafts, vmap) of
        the rule that decided them, when it has a config: its rows that ask read step_scores where they committed
        a token, t elsewhere (as every other row)."""
        device, W = self.logits.device, self.width
        rows = torch.tensor(index)
        positions = (rows[:, None] * W + torch.arange(W)).flatten()  # [c * W]
        # host tensors to the device by copies that do not block (issue 44 item 3)
        tokens = out[rows].flatten().long().clamp(min=0).to(device, non_blocking=True)
        at_rows = self.index[rows].flatten().to(device, non_blocking=True)  # [c * W]
        raw = self.logits[at_rows].float()  # [c * W, V]
        asking = self.asking(index) if decided is not None else []
        if asking:
            method, cfg, step_logits, outcome, n, vmap = decided
            sel = torch.tensor(asking).to(device, non_blocking=True)
            chosen, _ = step_scores(
                method.name,
                cfg,
                {name: x[sel] for name, x in step_logits.items()},
                outcome.num_accepted[
                    sel.to(outcome.num_accepted.device, non_blocking=True)
                ],
                n,
                vmap,
            )  # [G', n + 1, V]
            # the positions that committed a token (vLLM drops the others; step_scores leaves them unspecified)
            # (a host mask: its flat places index the device's chosen, never a device mask read on the host)
            kept = (out[rows[asking], : n + 1] >= 0).flatten().nonzero()[:, 0]
            at = (torch.tensor(asking)[:, None] * W + torch.arange(n + 1)).flatten()[
                kept
            ]
            picked = chosen.flatten(0, 1)[kept.to(chosen.device, non_blocking=True)]
            raw[at.to(device, non_blocking=True)] = picked.to(
                raw.device, non_blocking=True
            )
        mode = getattr(self.vllm_sampler, "logprobs_mode", "raw_logprobs")
        scores = (
            raw if mode == "raw_logits" else self.vllm_sampler.compute_logprobs(raw)
        )
        del raw
        self.pieces.append(
            (positions, self.vllm_sampler.gather_logprobs(scores, self.k, tokens))
        )
        self.done.update(index)

    def tensors(self, out: torch.Tensor):
        """vLLM's LogprobsTensors of the whole step [B * W rows], the rows not added yet read from t (in chunks);
        out [B, W]: the step's tokens."""
        from vllm.v1.outputs import LogprobsTensors  # lazy: loads vLLM

        rest = [i for i in range(self.batch.num_reqs) if i not in self.done]
        size = row_chunks.rows_per_chunk(self.width, self.logits.shape[-1])
        for part in row_chunks.spans(len(rest), size):
            if rest[part]:
                self.add(rest[part], out)
        n = self.batch.num_reqs * self.width
        first = self.pieces[0][1]
        whole = [
            torch.empty((n, *x.shape[1:]), dtype=x.dtype, device=x.device)
            for x in first[:3]
        ]
        for positions, piece in self.pieces:
            for x, part in zip(whole, piece[:3]):
                x[positions.to(x.device, non_blocking=True)] = part
        return LogprobsTensors(*whole)
