"""Patch (3): rope positions of the drafter's x_full view, Qwen-VL 3-D M-RoPE included.

The prompt positions come from the drafter model's own `get_mrope_input_positions` (the function vLLM's
runner uses for a multimodal target), fed with one feature per image: its image_grid_thw and the offset
and length of its image_pad run in x_full. A generated token at cache index j sits at j + delta on all
three axes, delta = (max prompt position + 1) - |x_full| (the M-RoPE delta). Text drafters use 1-D
positions j.
"""

from __future__ import annotations

import torch


def image_runs(ids: list[int], image_token_id: int) -> list[tuple[int, int]]:
    """(offset, length) of each maximal run of image_pad tokens, in order."""
    runs, start = [], None
    for i, tok in enumerate(ids + [None]):
        if tok == image_token_id and start is None:
            start = i
        elif tok != image_token_id and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


def prompt_positions(
    model,
    ids: list[int],
    image_grid_thw: torch.Tensor | None,
    image_token_id: int | None,
    uses_mrope: bool,
) -> tuple[torch.Tensor, int]:
    """Positions of the x_full prompt: [3, P] int64 with its M-RoPE delta, or [P] and 0 for 1-D RoPE."""
    if not uses_mrope:
        return torch.arange(len(ids), dtype=torch.int64), 0
    features = []
    if image_grid_thw is not None:
        from vllm.multimodal.inputs import (
            MultiModalBatchedField,
            MultiModalFeatureSpec,
            MultiModalFieldElem,
            MultiModalKwargsItem,
            PlaceholderRange,
        )  # lazy: loads vLLM

        for i, (offset, length) in enumerate(image_runs(ids, image_token_id)):
            grid = MultiModalFieldElem(
                data=image_grid_thw[i], field=MultiModalBatchedField()
            )
            features.append(
                MultiModalFeatureSpec(
                    data=MultiModalKwargsItem({"image_grid_thw": grid}),
                    modality="image",
                    identifier=f"x_full-image-{i}",
                    mm_position=PlaceholderRange(offset=offset, length=length),
                )
            )
    positions, delta = model.get_mrope_input_positions(list(ids), features)
    return positions.to(torch.int64), int(delta)


def generated_positions(
    start: int, n: int, delta: int, uses_mrope: bool
) -> torch.Tensor:
    """Positions of n generated tokens from cache index `start`: [3, n] (t = h = w) or [n]."""
    pos = torch.arange(start + delta, start + delta + n, dtype=torch.int64)
    return pos.expand(3, n) if uses_mrope else pos


def view_positions(
    prompt_pos: torch.Tensor, delta: int, start: int, n: int, uses_mrope: bool
) -> torch.Tensor:
    """Positions of cache indices start..start+n-1 of a view whose prompt positions are prompt_pos."""
    P = prompt_pos.shape[-1]
    head = prompt_pos[..., start : min(start + n, P)]
    tail_start = max(start, P)
    # no tail when the cache indices end inside the prompt (a chunk of a prompt longer than the pass budget)
    tail = generated_positions(
        tail_start, max(0, start + n - tail_start), delta, uses_mrope
    )
    return torch.cat([head, tail], dim=-1)
