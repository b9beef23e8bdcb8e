"""vllm_patches.drafter.mm_cache on a stand-in vision model: the vision tower once per request, nothing kept after."""

import torch

from vllm_patches.drafter.mm_cache import ImageCache


class Model:
    def __init__(self):
        self.visual = torch.nn.Linear(2, 2)
        self.visual.dtype = torch.float32  # vLLM's vision towers expose their dtype

    def embed_multimodal(self, pixel_values, image_grid_thw):
        self.visual(torch.zeros(1, 2))
        return [torch.ones(int(g.prod()) // 4, 3) for g in image_grid_thw]


def test_image_embeddings_leave_the_cache_with_the_prefill_that_reads_them():
    """The x_full prefill reads a request's embeddings once; they (and its pixels) must not stay on the device
    until the request ends."""
    cache = ImageCache(Model(), torch.device("cpu"))
    cache.put("r", torch.zeros(8, 2), torch.tensor([[1, 2, 4]]))
    assert [e.shape for e in cache.embeddings("r")] == [(2, 3)]
    assert cache.entries == {} and cache.vision_tower_calls == 1
    cache.drop("r")  # the request's end: nothing left to drop
