"""Patches (1) and (2): per-request image inputs, and the vision tower run once per request.

(1) pixel_values / image_grid_thw arrive in SamplingParams.extra_args; they are moved to the device once
    and kept per request id until it finishes.
(2) The first time a request's x_full prefill needs them, the drafter's `embed_multimodal` runs the vision
    tower and the patch merger once; its output (per image [tokens, hidden * (1 + DeepStack levels)]: the merged
    embedding and the multiscale DeepStack features the stock model injects into early decoder layers) goes to
    that prefill and the request's entry leaves the cache: the x_full prefill runs once per request (in chunks
    within one step; preemption keeps the x_full pool's blocks), so nothing reads them again and they do not
    hold device memory until the request ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class _Entry:
    pixel_values: torch.Tensor  # [num_patches, patch_dim]
    image_grid_thw: torch.Tensor  # [num_images, 3]


class ImageCache:
    def __init__(self, model, device: torch.device):
        self.model = model
        self.device = device
        self.entries: dict[str, _Entry] = {}
        self.vision_tower_calls = 0  # forwards of the vision tower, counted by a hook
        self.model.visual.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.vision_tower_calls += 1

    def put(
        self, req_id: str, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> None:
        self.entries[req_id] = _Entry(
            pixel_values.to(self.device, self.model.visual.dtype),
            image_grid_thw.to(self.device),
        )

    def embeddings(self, req_id: str) -> tuple[torch.Tensor, ...]:
        """The request's image embeddings, for its one x_full prefill: the entry (pixels included) is dropped."""
        e = self.entries.pop(req_id)
        return tuple(
            self.model.embed_multimodal(
                pixel_values=e.pixel_values, image_grid_thw=e.image_grid_thw
            )
        )

    def drop(self, req_id: str) -> None:
        self.entries.pop(req_id, None)

    def profile(self, model_config) -> list[int]:
        """Run the vision tower on the largest image the drafter's processor makes (vLLM's own dummy image for
        profiling), so that a profile run around it counts its activations; returns that image's grid."""
        from vllm.multimodal import MULTIMODAL_REGISTRY  # lazy: loads vLLM
        from vllm.multimodal.utils import group_and_batch_mm_kwargs  # lazy: loads vLLM

        dummy = MULTIMODAL_REGISTRY.get_dummy_mm_inputs(
            model_config, mm_counts={"image": 1}
        )
        item = dummy["mm_kwargs"]["image"][0]
        _, _, kwargs = next(
            group_and_batch_mm_kwargs([("image", item)], device=self.device)
        )
        with torch.inference_mode():
            self.model.embed_multimodal(**kwargs)
        return [int(x) for x in kwargs["image_grid_thw"].reshape(-1, 3)[0]]
