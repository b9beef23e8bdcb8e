"""One forward of the drafter over a ragged batch of rows against a paged KV cache, and the drafter handle
(`DrafterHandle`) the passes and views read instead of the proposer.

A row appends `length` tokens to its cache at cache indices start..start+length-1 with the given rope
positions; `block_table` lists the row's blocks (in the kernel's block size). The pass builds vLLM's
CommonAttentionMetadata (query_start_loc, seq_lens, block table, slot mapping), lets the drafter's own
attention builders (drafter_attention.py) plan it, and runs the model under a forward context of its own:
eagerly, or for a decode-shaped pass through the compiled drafter (drafter_graphs.py). With `kv` (layer name ->
tensor) the drafter's attention layers read and write those tensors for the
duration instead of the cache vLLM bound to them (the x_full pool); without it, vLLM's (the x_comp view,
on the verifier's block table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DrafterHandle:
    """What the drafter's views (full_view.py, comp_view.py) and passes (run_pass) read of the proposer, made
    once its attention is planned (AsymSpecProposer.initialize_attn_backend)."""

    model: torch.nn.Module  # vLLM's drafter model (embed_input_ids, compute_logits; `visual` for a VL drafter)
    device: torch.device
    vllm_config: object  # the engine's VllmConfig (the forward context's)
    attention: object  # drafter_attention.DrafterAttention: metadata planned for the drafter's heads
    graphs: object  # drafter_graphs.DrafterGraphs: its compiled passes
    attn_layers: dict  # layer name -> the drafter's vLLM Attention layer (its kv_cache rebound by bound_kv)
    uses_mrope: bool  # Qwen-VL M-RoPE: positions [3, N]; otherwise [N]
    facts: object  # request_args.EngineFacts: vocab_size, image_token_id, ... as the scheduler parsed against
    max_batched_tokens: (
        int  # the most tokens one pass reads (vLLM's profile sized its activations)
    )
    kv_cache_gid: int  # the KV cache group of the drafter's layers on the verifier's block table (x_comp)
    request_errors: tuple  # exceptions of a request's device work that fail only that request (faults.py)
    vmap: object = (
        None  # a cross-family pair's core.vocab_align.VocabMap; None: one vocabulary
    )


@dataclass
class PassRow:
    length: int  # tokens the row appends in this pass
    start: int  # cache slots the row already holds
    positions: torch.Tensor  # [3, length] (M-RoPE) or [length]
    block_table: torch.Tensor  # [num_blocks] int32, cache blocks of the row in order


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: on CUDA through pinned memory, so that the
    host goes on queueing the drafter's kernels (a plain copy from pageable memory synchronises the stream)."""
    if device.type != "cuda":
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)


def chunk_feeds(
    lengths: list[int], budget: int, admit: Callable[[int], bool] | None = None
) -> Iterator[list[tuple[int, int, int]]]:
    """Split row feeds into passes of at most `budget` tokens: each pass a list of (row, lo, hi), rows in
    order, a long feed continuing in the next pass (chunked prefill). Lazily: admit(row), where given, is asked
    as a row's feed enters a pass (after the passes before it were taken); a row it refuses is left out, the
    passes then those of the feeds without it."""
    current, room = [], budget
    for row, n in enumerate(lengths):
        if admit is not None and not admit(row):
            continue
        lo = 0
        while lo < n:
            take = min(n - lo, room)
            current.append((row, lo, lo + take))
            lo, room = lo + take, room - take
            if room == 0:
                yield current
                current, room = [], budget
    if current:
        yield current


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


def common_metadata(rows: list[PassRow], block_size: int, device: torch.device):
    """vLLM's CommonAttentionMetadata of a pass over `rows` (built on the host, batched: a handful of tensor ops
    whatever the number of rows, then copied without a sync)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata  # lazy: loads vLLM

    lengths, starts = [r.length for r in rows], [r.start for r in rows]
    n = torch.tensor(lengths, dtype=torch.int32)  # [B]
    start = torch.tensor(starts, dtype=torch.int32)  # [B]
    query_start = torch.zeros(len(rows) + 1, dtype=torch.int32)
    query_start[1:] = n.cumsum(0)
    seq_lens = start + n
    # [B, W] padding -> block 0
    table = torch.nn.utils.rnn.pad_sequence(
        [r.block_table for r in rows], batch_first=True
    ).to(torch.int32)
    num_tokens = sum(lengths)
    if (
        max(lengths) == 1 == min(lengths)
    ):  # a decode pass: one token a row, at its start
        row, index = torch.arange(len(rows)), start.long()
    else:
        row = torch.repeat_interleave(
            torch.arange(len(rows)), n.long()
        )  # [N] the row of each token
        index = (
            start.long()[row] + torch.arange(num_tokens) - query_start.long()[row]
        )  # [N] its cache index
    slots = (
        table.long()[row, index // block_size] * block_size + index % block_size
    )  # [N]
    return CommonAttentionMetadata(
        query_start_loc=to_device(query_start, device),
        query_start_loc_cpu=query_start,
        seq_lens=to_device(seq_lens, device),
        _seq_lens_cpu=seq_lens,
        _num_computed_tokens_cpu=start,
        num_reqs=len(rows),
        num_actual_tokens=num_tokens,
        max_query_len=max(lengths),
        max_seq_len=max(s + n for s, n in zip(starts, lengths)),
        block_table_tensor=to_device(table, device),
        slot_mapping=to_device(slots, device),
        causal=True,
    )


def run_pass(
    drafter: DrafterHandle,
    rows: list[PassRow],
    block_size: int,
    kv: dict[str, torch.Tensor] | None = None,
    token_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    decode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward `rows` reading token_ids [N] (on the device) or inputs_embeds [N, H]; return hidden states
    [N, H] and each row's last-token index [B] (on the device). A decode-shaped pass (`decode`, token_ids)
    runs compiled where the drafter is (drafter_graphs.py), every other pass eagerly."""
    from vllm.forward_context import set_forward_context  # lazy: loads vLLM

    device = drafter.device
    common = common_metadata(rows, block_size, device)
    metadata, slot_mapping = drafter.attention.build(common)
    positions = to_device(torch.cat([r.positions for r in rows], dim=-1), device)
    if decode and drafter.graphs.enabled:
        with bound_kv(drafter.attn_layers, kv):
            hidden = drafter.graphs.forward(
                token_ids,
                positions,
                metadata,
                common.slot_mapping,
                drafter.attention.layer_names,
            )
        return hidden, (common.query_start_loc[1:] - 1).long()
    with (
        bound_kv(drafter.attn_layers, kv),
        set_forward_context(
            metadata,
            drafter.vllm_config,
            num_tokens=common.num_actual_tokens,
            slot_mapping=slot_mapping,
            skip_compiled=True,
        ),
    ):
        hidden = drafter.model(
            input_ids=token_ids, positions=positions, inputs_embeds=inputs_embeds
        )
    return hidden, (common.query_start_loc[1:] - 1).long()
