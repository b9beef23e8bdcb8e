"""The drafter's second KV cache, for its x_full view: paged like vLLM's, owned by the proposer.

vLLM allocates the drafter layers' KV blocks on the verifier's block table (the x_comp token stream); the
x_full view has its own length, so it gets its own tensors, laid out exactly as vLLM lays out the drafter
layers' cache (the attention backend's shape and stride order), its own free list and its own block table
per request. Block 0 is never handed out: padding entries of a block table point at it.

The pool is allocated when the drafter is loaded, before vLLM measures the memory left for its own KV
cache, so vLLM's budget accounts for it. Its size is ASYMSPEC_FULL_VIEW_TOKENS tokens, by default
min(max_num_seqs * max_model_len, 65536); the scheduler patch admits an asymspec request only when the
pool can hold its whole x_full view (prompt + max_tokens + K + 1), so a running request never runs out.
"""

from __future__ import annotations

import math
import os

import torch

from asymspec_vl.errors import AsymSpecError


class PoolExhaustedError(AsymSpecError, RuntimeError):
    """The x_full KV pool has no free block (raise ASYMSPEC_FULL_VIEW_TOKENS or lower max_num_seqs)."""


FULL_VIEW_TOKENS_ENV = "ASYMSPEC_FULL_VIEW_TOKENS"
DEFAULT_TOKENS = 65536


def full_view_capacity(vllm_config) -> tuple[int, int]:
    """(usable blocks, block size) of the x_full pool; the same in the scheduler and the workers."""
    block = vllm_config.cache_config.block_size
    sched, max_len = vllm_config.scheduler_config, vllm_config.model_config.max_model_len
    tokens = int(os.environ.get(FULL_VIEW_TOKENS_ENV, 0)) or min(sched.max_num_seqs * max_len, DEFAULT_TOKENS)
    return math.ceil(tokens / block), block


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class FullViewPool:
    def __init__(self, layers: dict, vllm_config, device: torch.device):
        """layers: draft attention layer name -> layer (its backend and KV spec give the layout)."""
        usable, self.block_size = full_view_capacity(vllm_config)
        self.num_blocks = usable + 1
        cache_dtype = vllm_config.cache_config.cache_dtype
        self.tensors = {name: _allocate(layer.get_attn_backend(), layer.get_kv_cache_spec(vllm_config),
                                        self.num_blocks, self.block_size, cache_dtype, device)
                        for name, layer in layers.items()}
        self.free = list(range(self.num_blocks - 1, 0, -1))  # block 0 stays the padding block
        self.blocks: dict[str, list[int]] = {}

    def reserve(self, req_id: str, num_tokens: int) -> list[int]:
        """Make req_id hold enough blocks for num_tokens cache slots; return its block ids."""
        held = self.blocks.setdefault(req_id, [])
        need = blocks_for(num_tokens, self.block_size) - len(held)
        if need > len(self.free):
            raise PoolExhaustedError(
                f"the drafter's x_full KV pool ({self.num_blocks - 1} blocks of {self.block_size} tokens) cannot "
                f"hold this request's x_full view; set {FULL_VIEW_TOKENS_ENV} higher")
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
