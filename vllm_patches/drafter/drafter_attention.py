"""Attention metadata for the drafter's own passes, planned for the drafter's heads, never the verifier's.

vLLM builds the metadata builders of every attention layer from the engine's (the verifier's) model config,
and the drafter's layers share an attention group with the verifier's when their KV specs agree. Builders
that plan ahead read head counts from that config: FlashAttention 3's AOT scheduler
(`scheduler_metadata`, made for the verifier's 64 query / 8 KV heads, not Qwen3-VL-2B's 16 / 8) and
FlashInfer's `plan(num_qo_heads=...)`. So the drafter never runs on the verifier's per-layer metadata:
`DrafterAttention` holds builders created from the drafter's own vLLM config (model config = the drafter's),
and every drafter pass (x_comp scoring, x_full drafting, x_comp drafting) builds its metadata through
`build_for_drafting` (fast build: no AOT plan, as vLLM's own draft models do). Triton and FA2 plan nothing
ahead and behave exactly as before.

Consecutive drafter passes never wait for the device, so a builder that stages host data in reused pinned
buffers and copies them with non_blocking=True (FlashInfer: paged_kv_indptr / last_page_len, and its wrappers'
plan) would overwrite pass k's staging while its copy may still be queued, and pass k would run with pass k+1's
pages (vLLM's own draft loop syncs between builds; the V2 runner does not pin these buffers for that reason).
Such builders come as a ring of `RING` builders taken in turn, each with an event recorded after its build:
a builder is reused only once the copies of its previous build are done.

What this module does not know: which tokens a pass runs (drafter_pass.py builds the common metadata) and
how the verifier's step was scheduled (the runner patch hands over its common metadata).
"""

from __future__ import annotations

from copy import copy

import torch

STAGING_BUILDERS = (
    "FlashInferMetadataBuilder",
)  # stage host data in reused pinned buffers (see above)
RING = 2  # builders per staging group: the host may run this many passes ahead of the device's copies


def stages_host_data(builder) -> bool:
    return any(cls.__name__ in STAGING_BUILDERS for cls in type(builder).__mro__)


def copies_done_event(device: torch.device):
    """An event on the current stream after a build's host-to-device copies (None off CUDA: copies there are
    synchronous)."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


class DrafterAttention:
    """The drafter's attention groups with builders made from the drafter's config."""

    def __init__(
        self,
        groups: list,
        drafter_vllm_config,
        device: torch.device,
        reorder_threshold: int | None,
    ):
        """groups: the proposer's draft AttentionGroups, with vLLM's builders made for the kernel block size
        (a group's own spec carries the KV manager's block size, its builder's spec the kernel's: FlashInfer
        pages a 128-token block as 64-token pages, and vLLM's draft models plan with the kernel's);
        reorder_threshold: the runner's decode/prefill reorder threshold (its batches are ordered by it)."""
        self.groups, self.device = groups, device
        for group in groups:
            stock = group.get_metadata_builder()
            kernel_block_size = stock.kv_cache_spec.block_size
            group.create_metadata_builders(
                drafter_vllm_config,
                device,
                kernel_block_size=kernel_block_size,
                num_metadata_builders=RING if stages_host_data(stock) else 1,
            )
            for builder in group.metadata_builders:
                if (
                    reorder_threshold is not None
                    and builder.reorder_batch_threshold is not None
                ):
                    # a smaller threshold than the one a batch was ordered by is always safe: the split takes the
                    # first query longer than it as the start of the prefills
                    builder.reorder_batch_threshold = min(
                        builder.reorder_batch_threshold, reorder_threshold
                    )
        self.layer_names = [name for group in groups for name in group.layer_names]
        self.passes = (
            0  # builds so far: pass p plans with builder p % len(ring) of each group
        )
        self.copies_done: dict[
            tuple[int, int], object
        ] = {}  # (group, builder) -> event after its last build

    def share_workspaces(self, runner_groups: list[list]) -> None:
        """Builders that keep a large workspace (FlashInfer) use the runner's, which vLLM's memory profile
        counted, instead of allocating one of their own after it. The drafter plans after the verifier's
        forward and the verifier plans again before its next one, so one workspace serves both in turn."""
        runner_builders = {
            type(b): b
            for groups in runner_groups
            for g in groups
            for b in g.metadata_builders
        }
        for builder in (b for group in self.groups for b in group.metadata_builders):
            owner = runner_builders.get(type(builder))
            if (
                owner is not None
                and hasattr(builder, "set_workspace_buffer")
                and hasattr(owner, "_get_workspace_buffer")
            ):
                builder.set_workspace_buffer(owner._get_workspace_buffer())

    def build(self, common) -> tuple[dict, dict]:
        """Per-layer metadata and slot mappings of one drafter pass from its CommonAttentionMetadata."""
        metadata = {}
        for g, group in enumerate(self.groups):
            turn = (g, self.passes % len(group.metadata_builders))
            if self.copies_done.get(turn) is not None:
                self.copies_done[
                    turn
                ].synchronize()  # that builder's previous staging reached the device
            built = group.get_metadata_builder(turn[1]).build_for_drafting(
                common_attn_metadata=common, draft_index=0
            )
            self.copies_done[turn] = copies_done_event(self.device)
            metadata.update({name: built for name in group.layer_names})
        self.passes += 1
        return metadata, {name: common.slot_mapping for name in self.layer_names}


def verifier_common_for_group(
    common, runner, group_id: int, slot_mappings_by_group: dict | None
):
    """The verifier step's CommonAttentionMetadata (unpadded) as seen by KV cache group `group_id`: the same
    queries and sequence lengths, that group's block table and slot mapping (the drafter's layers may sit
    in another group than the first when their KV spec differs from the verifier's)."""
    if common is None or group_id <= 0 or slot_mappings_by_group is None:
        return common
    common = copy(common)
    table = runner.input_batch.block_table[group_id]
    common.block_table_tensor = table.get_device_tensor(common.num_reqs)[
        : common.num_reqs
    ]
    common.slot_mapping = slot_mappings_by_group[group_id][: common.num_actual_tokens]
    return common
