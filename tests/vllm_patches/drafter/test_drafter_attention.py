"""vllm_patches.drafter.drafter_attention on stand-in attention groups: the builders the drafter's passes plan with."""

import types

import torch

from vllm_patches.drafter.drafter_attention import DrafterAttention


class Spec:
    def __init__(self, block_size: int):
        self.block_size = block_size

    def copy_with_new_block_size(self, block_size: int) -> "Spec":
        return Spec(block_size)


class Builder:
    """A metadata builder stand-in: records what it was made from and each build."""

    reorder_batch_threshold = None

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.kv_cache_spec, self.vllm_config, self.builds = (
            kv_cache_spec,
            vllm_config,
            [],
        )

    def build_for_drafting(self, common_attn_metadata, draft_index):
        self.builds.append(common_attn_metadata)
        return ("metadata", id(self), len(self.builds))


def group_like_vllms(builder_cls, manager_block: int, kernel_block: int):
    """An AttentionGroup as vLLM's initialize_attn_backend leaves it: spec in the manager's block size, builders
    made with the kernel's (vllm/v1/worker/utils.py AttentionGroup.create_metadata_builders)."""
    from vllm.v1.worker.utils import AttentionGroup

    backend = types.SimpleNamespace(get_builder_cls=lambda: builder_cls)
    group = AttentionGroup(
        backend=backend,
        layer_names=["drafter.layers.0.attn"],
        kv_cache_spec=Spec(manager_block),
        kv_cache_group_id=0,
    )
    group.create_metadata_builders(
        "verifier config", torch.device("cpu"), kernel_block_size=kernel_block
    )
    return group


def test_drafter_builders_take_the_kernels_block_size_not_the_managers():
    """Finding 5: with FlashInfer and --block-size 128 the kernel pages are 64 tokens: the drafter's builders
    are made for 64, as vLLM's own draft models' are (eagle.py initialize_attn_backend), from the drafter's
    config."""
    group = group_like_vllms(Builder, manager_block=128, kernel_block=64)
    DrafterAttention(
        [group], "drafter config", torch.device("cpu"), reorder_threshold=None
    )
    builder = group.get_metadata_builder()
    assert (
        builder.kv_cache_spec.block_size == 64
        and builder.vllm_config == "drafter config"
    )


def common(k: int):
    """The CommonAttentionMetadata of drafter pass k (the fields these builders read)."""
    return types.SimpleNamespace(pass_index=k, slot_mapping=torch.tensor([k]))


class FlashInferMetadataBuilder(Builder):
    """Stands in for FlashInfer's builder: each build stages its pages in one reused host buffer, copied to the
    device without a wait (flashinfer.py paged_kv_indptr_cpu_buffer, copy_(..., non_blocking=True))."""

    def __init__(self, *args):
        super().__init__(*args)
        self.staging = torch.zeros(4, dtype=torch.int32)

    def build_for_drafting(self, common_attn_metadata, draft_index):
        self.staging.fill_(common_attn_metadata.pass_index)
        return super().build_for_drafting(common_attn_metadata, draft_index)


class Event:
    log: list = []

    def __init__(self, name):
        self.name = name

    def synchronize(self):
        Event.log.append(("wait", self.name))


def test_consecutive_flashinfer_passes_never_share_a_staging_buffer(monkeypatch):
    """Finding 4: pass k+1 plans with another builder than pass k, so it never overwrites pass k's staged pages
    while pass k's copy may be queued; a builder is taken again only after waiting on the event recorded after
    its previous build."""
    from vllm_patches.drafter import drafter_attention

    made = iter(range(100))
    monkeypatch.setattr(
        drafter_attention,
        "copies_done_event",
        lambda device: Event(next(made)),
        raising=False,
    )
    Event.log = []
    group = group_like_vllms(FlashInferMetadataBuilder, 16, 16)
    attention = DrafterAttention(
        [group], "drafter config", torch.device("cpu"), reorder_threshold=None
    )
    staged = []
    for k in range(4):  # passes 0..3 with common metadata k
        metadata, _ = attention.build(common(k))
        builder = next(
            b
            for b in group.metadata_builders
            if id(b) == metadata["drafter.layers.0.attn"][1]
        )
        staged.append(builder)
        assert int(builder.staging[0]) == k
        if k:
            assert (
                staged[k] is not staged[k - 1]
            )  # pass k-1's staging is untouched by pass k
            assert int(staged[k - 1].staging[0]) == k - 1
    assert Event.log == [
        ("wait", 0),
        ("wait", 1),
    ]  # passes 2 and 3 waited for passes 0 and 1's copies


def test_builders_without_staging_stay_single():
    """FlashAttention and Triton builders plan nothing on reused host buffers: one builder, as before."""
    group = group_like_vllms(Builder, 16, 16)
    attention = DrafterAttention(
        [group], "drafter config", torch.device("cpu"), reorder_threshold=None
    )
    for k in range(3):
        attention.build(common(k))
    assert (
        len(group.metadata_builders) == 1
        and len(group.get_metadata_builder().builds) == 3
    )
