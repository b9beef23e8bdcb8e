"""vllm_patches.drafter_attention on stand-in attention groups: the builders the drafter's passes plan with."""

import types

import torch

from vllm_patches.drafter_attention import DrafterAttention


class Spec:
    def __init__(self, block_size: int):
        self.block_size = block_size

    def copy_with_new_block_size(self, block_size: int) -> "Spec":
        return Spec(block_size)


class Builder:
    """A metadata builder stand-in: records what it was made from and each build."""
    reorder_batch_threshold = None

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.kv_cache_spec, self.vllm_config, self.builds = kv_cache_spec, vllm_config, []

    def build_for_drafting(self, common_attn_metadata, draft_index):
        self.builds.append(common_attn_metadata)
        return ("metadata", id(self), len(self.builds))


def group_like_vllms(builder_cls, manager_block: int, kernel_block: int):
    """An AttentionGroup as vLLM's initialize_attn_backend leaves it: spec in the manager's block size, builders
    made with the kernel's (vllm/v1/worker/utils.py AttentionGroup.create_metadata_builders)."""
    from vllm.v1.worker.utils import AttentionGroup

    backend = types.SimpleNamespace(get_builder_cls=lambda: builder_cls)
    group = AttentionGroup(backend=backend, layer_names=["drafter.layers.0.attn"], kv_cache_spec=Spec(manager_block),
                           kv_cache_group_id=0)
    group.create_metadata_builders("verifier config", torch.device("cpu"), kernel_block_size=kernel_block)
    return group


def test_drafter_builders_take_the_kernels_block_size_not_the_managers():
    """Finding 5: with FlashInfer and --block-size 128 the kernel pages are 64 tokens: the drafter's builders
    are made for 64, as vLLM's own draft models' are (eagle.py initialize_attn_backend), from the drafter's
    config."""
    group = group_like_vllms(Builder, manager_block=128, kernel_block=64)
    DrafterAttention([group], "drafter config", torch.device("cpu"), reorder_threshold=None)
    builder = group.get_metadata_builder()
    assert builder.kv_cache_spec.block_size == 64 and builder.vllm_config == "drafter config"
