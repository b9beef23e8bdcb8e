"""The drafter's second KV cache, for its x_full view: paged like vLLM's, owned by the proposer.

vLLM allocates the drafter layers' KV blocks on the verifier's block table (the x_comp token stream); the
x_full view has its own length, so it gets its own tensors, laid out exactly as vLLM lays out the drafter
layers' cache (the attention backend's shape and stride order), its own free list and its own block table
per request. Block 0 is never handed out: padding entries of a block table point at it.
"""

from __future__ import annotations

import torch

from asymspec_vl.errors import AsymSpecError


class PoolExhaustedError(AsymSpecError, RuntimeError):
    """The x_full KV pool has no free block (raise ASYMSPEC_FULL_VIEW_TOKENS or lower max_num_seqs)."""


class FullViewPool:
    def __init__(self, groups, num_blocks: int, cache_dtype: str, device: torch.device):
        """groups: the proposer's draft AttentionGroups (backend, per-layer spec, kernel block size)."""
        self.block_size = groups[0].get_metadata_builder().kv_cache_spec.block_size
        self.tensors: dict[str, torch.Tensor] = {}
        for g in groups:
            spec = g.get_metadata_builder().kv_cache_spec
            for name in g.layer_names:
                self.tensors[name] = _allocate(g.backend, spec, num_blocks, self.block_size, cache_dtype, device)
        self.num_blocks = num_blocks
        self.free = list(range(num_blocks - 1, 0, -1))  # block 0 stays the padding block
        self.blocks: dict[str, list[int]] = {}

    def reserve(self, req_id: str, num_tokens: int) -> list[int]:
        """Make req_id hold enough blocks for num_tokens cache slots; return its block ids."""
        held = self.blocks.setdefault(req_id, [])
        need = -(-num_tokens // self.block_size) - len(held)
        if need > len(self.free):
            raise PoolExhaustedError(
                f"the drafter's x_full KV pool ({self.num_blocks} blocks of {self.block_size} tokens) is full; "
                "set ASYMSPEC_FULL_VIEW_TOKENS higher or max_num_seqs lower")
        held.extend(self.free.pop() for _ in range(max(need, 0)))
        return held

    def release(self, req_id: str) -> None:
        self.free.extend(reversed(self.blocks.pop(req_id, [])))


def _allocate(backend, spec, num_blocks: int, block_size: int, cache_dtype: str, device) -> torch.Tensor:
    """A zeroed cache tensor in the backend's layout, as vLLM's runner builds it."""
    shape = backend.get_kv_cache_shape(num_blocks, block_size, spec.num_kv_heads, spec.head_size,
                                       cache_dtype_str=cache_dtype)
    try:
        order = backend.get_kv_cache_stride_order()
        assert len(order) == len(shape)
    except (AttributeError, NotImplementedError):
        order = tuple(range(len(shape)))
    inverse = [order.index(i) for i in range(len(order))]
    return torch.zeros(tuple(shape[i] for i in order), dtype=spec.dtype, device=device).permute(*inverse)
