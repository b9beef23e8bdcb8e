"""One forward of the drafter over a ragged batch of rows against a paged KV cache.

A row appends `tokens` to its cache at cache indices start..start+n-1 (n = len(tokens)) with the given
rope positions; `block_table` lists the row's blocks. The pass builds vLLM's CommonAttentionMetadata
(query_start_loc, seq_lens, block table, slot mapping), lets the drafter's own attention metadata
builders turn it into backend metadata, and runs the model under a forward context of its own. With
`kv` (layer name -> tensor) the drafter's attention layers read and write those tensors for the
duration instead of the cache vLLM bound to them (the x_full pool); without it, vLLM's (the x_comp view,
on the verifier's block table).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass
class PassRow:
    tokens: list[int]
    start: int  # cache slots the row already holds
    positions: torch.Tensor  # [3, n] (M-RoPE) or [n]
    block_table: torch.Tensor  # [num_blocks] int32, cache blocks of the row in order


@contextmanager
def bound_kv(layers: dict, kv: dict[str, torch.Tensor] | None):
    """Temporarily bind other cache tensors to the drafter's attention layers."""
    if not kv:
        yield
        return
    saved = {name: layers[name].kv_cache for name in kv}
    try:
        for name, tensor in kv.items():
            layers[name].kv_cache = tensor
        yield
    finally:
        for name, tensor in saved.items():
            layers[name].kv_cache = tensor


def run_pass(proposer, rows: list[PassRow], block_size: int, kv: dict[str, torch.Tensor] | None = None,
             inputs_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward `rows`; return hidden states [N, H] and each row's last-token index [B]."""
    from vllm.forward_context import set_forward_context
    from vllm.v1.attention.backend import CommonAttentionMetadata

    dev = proposer.device
    n = torch.tensor([len(r.tokens) for r in rows], dtype=torch.int32)
    start = torch.tensor([r.start for r in rows], dtype=torch.int32)
    qsl = torch.zeros(len(rows) + 1, dtype=torch.int32)
    qsl[1:] = n.cumsum(0)
    seq_lens = start + n
    width = max(len(r.block_table) for r in rows)
    table = torch.zeros(len(rows), width, dtype=torch.int32)  # padding -> block 0
    for i, r in enumerate(rows):
        table[i, :len(r.block_table)] = r.block_table.cpu()
    slots = torch.cat([_slots(table[i], r.start, len(r.tokens), block_size) for i, r in enumerate(rows)])
    cad = CommonAttentionMetadata(
        query_start_loc=qsl.to(dev), query_start_loc_cpu=qsl, seq_lens=seq_lens.to(dev),
        _seq_lens_cpu=seq_lens, _num_computed_tokens_cpu=start, num_reqs=len(rows),
        num_actual_tokens=int(qsl[-1]), max_query_len=int(n.max()), max_seq_len=int(seq_lens.max()),
        block_table_tensor=table.to(dev), slot_mapping=slots.to(dev), causal=True)
    metadata = {}
    for group in proposer.draft_attn_groups:
        built = group.get_metadata_builder().build(common_prefix_len=0, common_attn_metadata=cad)
        metadata.update({name: built for name in group.layer_names})
    slot_mapping = {name: cad.slot_mapping for name in metadata}
    positions = torch.cat([r.positions for r in rows], dim=-1).to(dev)
    ids = None
    if inputs_embeds is None:
        ids = torch.tensor([t for r in rows for t in r.tokens], dtype=torch.int32, device=dev)
    with bound_kv(proposer.attn_layers, kv), set_forward_context(
            metadata, proposer.vllm_config, num_tokens=cad.num_actual_tokens, slot_mapping=slot_mapping):
        hidden = proposer.model(input_ids=ids, positions=positions, inputs_embeds=inputs_embeds)
    return hidden, (qsl[1:] - 1).long().to(dev)


def _slots(table_row: torch.Tensor, start: int, n: int, block_size: int) -> torch.Tensor:
    """Cache slot of indices start..start+n-1: block_table[j // bs] * bs + j % bs. [n] int64."""
    j = torch.arange(start, start + n)
    return table_row.long()[j // block_size] * block_size + j % block_size
