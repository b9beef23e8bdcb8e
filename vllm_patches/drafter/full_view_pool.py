"""The drafter's second KV cache, for its x_full view: paged like vLLM's, owned by the proposer.

vLLM allocates the drafter layers' KV blocks on the verifier's block table (the x_comp token stream); the
x_full view has its own length, so it gets its own tensors, laid out exactly as vLLM lays out the drafter
layers' cache (the attention backend's shape and stride order, in blocks of the attention kernel's block
size), its own free list and its own block table per request. Block 0 is never handed out: padding entries
of a block table point at it.

Size: FULL_VIEW_TOKENS_ENV tokens, by default min(max_num_seqs * max_model_len, 65536). The scheduler patch
admits an asymspec request only when the pool can hold its whole x_full view (prompt + max_tokens + K + 1),
counting in blocks of the scheduler's block size, so a running request never runs out. A cross-family pair's
drafter keeps its own x_comp view in the same pool (full_view.FullView with a tag), and admission counts it too.

When: the memory is reserved while the drafter loads (`reserve_bytes`), so vLLM's memory profile counts it
before it sizes its own KV cache, and the pool is laid out once the KV cache config is final
(`FullViewPool`, from the proposer's initialize_attn_backend): vLLM may change the block size after the
models load (the attention backend's preferred size), max_model_len (to fit memory) and the kernel block size
(a backend that needs smaller blocks than the KV manager's).
"""

from __future__ import annotations

import logging
import math
import os

import torch

from asymspec_vl.core.errors import AsymSpecError

logger = logging.getLogger(__name__)


class PoolExhaustedError(AsymSpecError, RuntimeError):
    """The x_full KV pool has no free block (raise ASYMSPEC_FULL_VIEW_TOKENS or lower max_num_seqs)."""


FULL_VIEW_TOKENS_ENV = "ASYMSPEC_FULL_VIEW_TOKENS"
DEFAULT_TOKENS = 65536
_BLOCK_SLACK = 512  # tokens reserved beyond the capacity for block rounding (final block sizes are unknown)


def full_view_tokens(vllm_config) -> int:
    sched, max_len = (
        vllm_config.scheduler_config,
        vllm_config.model_config.max_model_len,
    )
    return int(os.environ.get(FULL_VIEW_TOKENS_ENV, 0)) or min(
        sched.max_num_seqs * max_len, DEFAULT_TOKENS
    )


def full_view_capacity(vllm_config) -> tuple[int, int]:
    """(usable blocks, block size) of the x_full pool in the scheduler's blocks; the same in every process
    once the KV cache config is final."""
    block = vllm_config.cache_config.block_size
    return math.ceil(full_view_tokens(vllm_config) / block), block


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def bytes_per_token(layers: dict, vllm_config) -> int:
    """KV bytes one token takes over all drafter layers (K and V)."""
    total = 0
    for layer in layers.values():
        spec = layer.get_kv_cache_spec(vllm_config)
        total += spec.real_page_size_bytes // spec.block_size
    return total


def reserve_bytes(layers: dict, vllm_config, device: torch.device) -> torch.Tensor:
    """A placeholder holding the pool's memory while vLLM profiles (released by FullViewPool)."""
    tokens = full_view_tokens(vllm_config) + _BLOCK_SLACK
    return torch.empty(
        tokens * bytes_per_token(layers, vllm_config), dtype=torch.uint8, device=device
    )


class FullViewPool:
    def __init__(
        self, layers: dict, vllm_config, device: torch.device, kernel_block_size: int
    ):
        """layers: draft attention layer name -> layer (its backend and KV spec give the layout);
        kernel_block_size: the block size the drafter's attention kernels index (a divisor of the
        scheduler's block size)."""
        usable, scheduler_block = full_view_capacity(vllm_config)
        if scheduler_block % kernel_block_size:
            raise ValueError(
                f"kernel block size {kernel_block_size} does not divide the KV cache block size "
                f"{scheduler_block}"
            )
        self.block_size = kernel_block_size
        self.num_blocks = usable * (scheduler_block // kernel_block_size) + 1
        cache_dtype = vllm_config.cache_config.cache_dtype
        self.tensors = {}
        for name, layer in layers.items():
            spec = layer.get_kv_cache_spec(vllm_config)
            self.tensors[name] = _allocate(
                layer.get_attn_backend(),
                spec,
                self.num_blocks,
                kernel_block_size,
                cache_dtype,
                device,
            )
        self.free = list(
            range(self.num_blocks - 1, 0, -1)
        )  # block 0 stays the padding block
        self.blocks: dict[str, list[int]] = {}
        logger.info(
            "asymspec: x_full KV pool of %d blocks x %d tokens (%.1f MiB)",
            self.num_blocks - 1,
            kernel_block_size,
            sum(t.numel() * t.element_size() for t in self.tensors.values()) / 2**20,
        )

    def reserve(self, req_id: str, num_tokens: int) -> list[int]:
        """Make req_id hold enough blocks for num_tokens cache slots; return its block ids."""
        held = self.blocks.setdefault(req_id, [])
        need = blocks_for(num_tokens, self.block_size) - len(held)
        if need > len(self.free):
            raise PoolExhaustedError(
                f"the drafter's x_full KV pool ({self.num_blocks - 1} blocks of {self.block_size} tokens) cannot "
                f"hold this request's x_full view; set {FULL_VIEW_TOKENS_ENV} higher"
            )
        held.extend(self.free.pop() for _ in range(max(need, 0)))
        return held

    def release(self, req_id: str) -> None:
        self.free.extend(reversed(self.blocks.pop(req_id, [])))


def _allocate(
    backend, spec, num_blocks: int, block_size: int, cache_dtype: str, device
) -> torch.Tensor:
    """A zeroed cache tensor in the backend's layout, as vLLM's runner builds it."""
    shape = backend.get_kv_cache_shape(
        num_blocks,
        block_size,
        spec.num_kv_heads,
        spec.head_size,
        cache_dtype_str=cache_dtype,
    )
    try:
        order = backend.get_kv_cache_stride_order()
        assert len(order) == len(shape)
    except (AttributeError, NotImplementedError):
        order = tuple(range(len(shape)))
    inverse = [order.index(i) for i in range(len(order))]
    return torch.zeros(
        tuple(shape[i] for i in order), dtype=spec.dtype, device=device
    ).permute(*inverse)
