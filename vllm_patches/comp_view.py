"""Drafting on the x_comp view (modes sd and scd, and requests without extra_args): greedy drafts from the
verifier's token stream, in the lookahead KV slots vLLM reserves for the drafter's layers."""

from __future__ import annotations

import torch

from asymspec_vl.gate import greedy
from asymspec_vl.vocab import token_mask

from .drafter_pass import PassRow, run_pass, to_device
from .mrope import generated_positions


def draft(drafter, rows) -> dict[str, list[int]]:
    """Greedy drafts from the verifier's token stream, written into the lookahead slots vLLM reserves.
    Right after a prompt vLLM reserves none: a row whose drafts reach an unallocated block writes them
    through vLLM's null block, so such rows draft one at a time (never sharing those slots). A reused batch row
    keeps its previous request's block ids past num_blocks_per_row (vLLM resets only the count): those entries
    read as the null block here, or the drafts land in a block that now holds another request's KV (a live one,
    or a preempted one's prefix-cached blocks). The drafts stay on the device until a group's last pass."""
    table = drafter.runner.input_batch.block_table[drafter.kv_cache_gid]
    blocks = allocated_blocks(table, drafter.runner.input_batch.num_reqs)  # [B, W] this step's, on the host
    requests = {req_id: drafter.runner.requests[req_id] for _, req_id, _ in rows}
    starts = {req_id: r.num_tokens - 1 for req_id, r in requests.items()}
    fits = [bool(blocks[i, (starts[req_id] + state.K - 1) // table.block_size] > 0) for i, req_id, state in rows]
    groups = [[row for row, ok in zip(rows, fits) if ok]] + [[row] for row, ok in zip(rows, fits) if not ok]
    no_ban = token_mask((), drafter.facts.vocab_size, drafter.device)
    drafts: dict[str, list[int]] = {}
    for group in (g for g in groups if g):
        tokens = to_device(torch.tensor([requests[req_id].output_token_ids[-1] for _, req_id, _ in group]),
                           drafter.device)  # [G]
        banned = torch.stack([state.banned if state.banned is not None else no_ban for _, _, state in group])
        drafted = []
        for k in range(max(state.K for _, _, state in group)):
            live = [j for j, (_, _, state) in enumerate(group) if k < state.K]
            index = to_device(torch.tensor(live), drafter.device) if len(live) < len(group) else None
            batch = [PassRow(1, starts[req_id] + k, generated_positions(starts[req_id] + k, 1, 0, drafter.uses_mrope),
                             blocks[i]) for i, req_id, _ in (group[j] for j in live)]
            hidden, last = run_pass(drafter, batch, table.block_size,
                                    token_ids=tokens if index is None else tokens[index], decode=True)
            new = greedy(drafter.model.compute_logits(hidden[last]), banned if index is None else banned[index])
            tokens = new if index is None else tokens.index_put((index,), new)
            drafted.append(tokens)
        for (_, req_id, state), row in zip(group, torch.stack(drafted, 1).tolist()):
            drafts[req_id] = row[:state.K]
    return drafts


def allocated_blocks(table, num_reqs: int) -> torch.Tensor:
    """The rows' block ids in the kernel's block size, 0 (vLLM's null block) past each row's own blocks.
    vLLM resets only the count of a reused or moved row (block_table.py add_row / move_row), not its tail, so
    the ids there may belong to another live request. table: a vLLM BlockTable. -> [num_reqs, W] int32."""
    blocks = table.get_cpu_tensor()[:num_reqs]  # [B, W]
    owned = torch.as_tensor(table.num_blocks_per_row[:num_reqs]).long()  # [B]
    return blocks * (torch.arange(blocks.shape[1]) < owned[:, None])
