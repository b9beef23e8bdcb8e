"""The drafter's x_comp view (`CompView`, owned by the proposer; it reads the drafter through its handle,
drafter_pass.DrafterHandle): the drafter on the verifier's token stream, in the KV blocks vLLM allocates for the
drafter's layers on the verifier's block table. Its pass over the verifier's step inputs gives the logits b at the
verified positions; drafting on it (methods sd and scd, and requests without extra_args) writes its drafts
(draft_pick.py) into the lookahead KV slots vLLM reserves for those layers."""

from __future__ import annotations

import torch

from asymspec_vl.inputs.vocab import token_mask

from ..requests.mrope import generated_positions
from .draft_logits import DraftLogits
from .draft_pick import pick
from .drafter_pass import DrafterHandle, PassRow, run_pass, to_device


class CompView:
    """The x_comp view of the proposer's drafter, with what it keeps for one step."""

    def __init__(self, drafter: DrafterHandle, draft_logits: DraftLogits):
        self.drafter = drafter
        self.draft_logits = (
            draft_logits  # a sampling row's drafting logits q go here (draft_pick.py)
        )
        self.verifier_common = (
            None  # this step's verifier CommonAttentionMetadata for the drafter's group
        )
        self.hidden: torch.Tensor | None = (
            None  # [num_tokens, H] this step's pass over the verifier's inputs
        )

    def score(self, input_ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Run the drafter on the verifier's step inputs (after the verifier's forward): the same queries and
        KV slots, the drafter's own attention metadata (see drafter_attention.py)."""
        from vllm.forward_context import set_forward_context  # lazy: loads vLLM

        drafter = self.drafter
        common = self.verifier_common
        n = (
            common.num_actual_tokens
        )  # the verifier's input may be padded for a CUDA graph: not the drafter's
        positions = positions[..., :n]
        if drafter.uses_mrope and positions.dim() == 1:
            positions = (
                positions.unsqueeze(0).expand(3, -1).contiguous()
            )  # text: t = h = w
        metadata, slot_mapping = drafter.attention.build(common)
        if drafter.graphs.enabled:
            self.hidden = drafter.graphs.forward(
                input_ids[:n],
                positions,
                metadata,
                common.slot_mapping,
                drafter.attention.layer_names,
            )
            return
        with set_forward_context(
            metadata,
            drafter.vllm_config,
            num_tokens=n,
            slot_mapping=slot_mapping,
            skip_compiled=True,
        ):
            self.hidden = drafter.model(
                input_ids=input_ids[:n], positions=positions, inputs_embeds=None
            )

    def logits(self, token_indices: torch.Tensor) -> torch.Tensor:
        """b at the given token indices of this step's verifier inputs. [n] -> [n, V]."""
        return self.drafter.model.compute_logits(self.hidden[token_indices])

    def draft(self, rows, input_batch, requests: dict) -> dict[str, list[int]]:
        """Greedy drafts from the verifier's token stream, written into the lookahead slots vLLM reserves.
        Right after a prompt vLLM reserves none: a row whose drafts reach an unallocated block writes them
        through vLLM's null block, so such rows draft one at a time (never sharing those slots). A reused batch row
        keeps its previous request's block ids past num_blocks_per_row (vLLM resets only the count): those entries
        read as the null block here, or the drafts land in a block that now holds another request's KV (a live one,
        or a preempted one's prefix-cached blocks). The drafts stay on the device until a group's last pass.
        rows: (batch index, req_id, RowState); input_batch: vLLM's InputBatch; requests: the runner's req_id ->
        CachedRequestState."""
        drafter = self.drafter
        table = input_batch.block_table[drafter.kv_cache_gid]
        requests = {req_id: requests[req_id] for _, req_id, _ in rows}
        starts = {req_id: r.num_tokens - 1 for req_id, r in requests.items()}
        # the columns the K passes read: every row's own blocks and each drafting row's last draft slot's block
        # (the null block past a row's own), not the table's full width (max_model_len / block_size)
        reach = max(
            (starts[req_id] + s.K - 1) // table.block_size for _, req_id, s in rows
        )
        blocks = allocated_blocks(
            table, input_batch.num_reqs, reach + 1
        )  # [B, w] this step's, on the host
        fits = [
            bool(blocks[i, (starts[req_id] + state.K - 1) // table.block_size] > 0)
            for i, req_id, state in rows
        ]
        groups = [[row for row, ok in zip(rows, fits) if ok]] + [
            [row] for row, ok in zip(rows, fits) if not ok
        ]
        no_ban = token_mask((), drafter.facts.vocab_size, drafter.device)
        drafts: dict[str, list[int]] = {}
        for group in (g for g in groups if g):
            tokens = to_device(
                torch.tensor(
                    [requests[req_id].output_token_ids[-1] for _, req_id, _ in group]
                ),
                drafter.device,
            )  # [G]
            banned = torch.stack(
                [
                    state.banned if state.banned is not None else no_ban
                    for _, _, state in group
                ]
            )
            drafted = []
            for k in range(max(state.K for _, _, state in group)):
                live = [j for j, (_, _, state) in enumerate(group) if k < state.K]
                index = (
                    to_device(torch.tensor(live), drafter.device)
                    if len(live) < len(group)
                    else None
                )
                batch = [
                    PassRow(
                        1,
                        starts[req_id] + k,
                        generated_positions(
                            starts[req_id] + k, 1, 0, drafter.uses_mrope
                        ),
                        blocks[i],
                    )
                    for i, req_id, _ in (group[j] for j in live)
                ]
                hidden, last = run_pass(
                    drafter,
                    batch,
                    table.block_size,
                    token_ids=tokens if index is None else tokens[index],
                    decode=True,
                )
                new = pick(
                    drafter.model.compute_logits(hidden[last]),
                    [group[j][2] for j in live],
                    k,
                    banned if index is None else banned[index],
                    self.draft_logits,
                )
                tokens = new if index is None else tokens.index_put((index,), new)
                drafted.append(tokens)
            for (_, req_id, state), row in zip(group, torch.stack(drafted, 1).tolist()):
                drafts[req_id] = row[: state.K]
        return drafts


def allocated_blocks(table, num_reqs: int, reach: int = 0) -> torch.Tensor:
    """The rows' block ids in the kernel's block size, 0 (vLLM's null block) past each row's own blocks, in
    the allocated width w: the widest row's own blocks, at least `reach` columns, at most the table's width W
    (the x_comp passes copy this table to the device once a pass; at W, max_model_len / block_size columns).
    vLLM resets only the count of a reused or moved row (block_table.py add_row / move_row), not its tail, so
    the ids there may belong to another live request. table: a vLLM BlockTable. -> [num_reqs, w] int32."""
    owned = torch.as_tensor(table.num_blocks_per_row[:num_reqs]).long()  # [B]
    width = min(table.max_num_blocks_per_req, max(int(owned.max()), reach))
    blocks = table.get_cpu_tensor()[:num_reqs, :width]  # [B, w]
    return blocks * (torch.arange(width) < owned[:, None])
