"""The drafter's vision tower runs once per request; cached and uncached forwards agree (M-RoPE included)."""

import torch
from helpers import random_request

from asymspec_vl import AsymSpecConfig
from asymspec_vl.backends.hf.reference import logits_after
from asymspec_vl.backends.hf.source import HFSource
from asymspec_vl.inputs.prompts import encode_request


class VisionCounter:
    def __init__(self, visual):
        self.calls, self.images = 0, 0
        self.handle = visual.register_forward_hook(self)

    def __call__(self, module, args, kwargs_or_out, *rest):
        self.calls += 1
        grid = args[1] if len(args) > 1 else None
        self.images += 0 if grid is None else grid.shape[0]


def test_vision_tower_runs_once_per_request(tiny_vl):
    counter = VisionCounter(tiny_vl.backend.drafter.model.visual)
    try:
        res = tiny_vl.generate_batch(
            [random_request(0)], config=AsymSpecConfig(K=2, max_new_tokens=24)
        )[0]
        assert res.stats.steps >= 5 and counter.calls == 1
        counter.calls = 0
        reqs = [random_request(i) for i in range(3)]
        tiny_vl.generate_batch(reqs, config=AsymSpecConfig(K=4, max_new_tokens=24))
        assert (
            counter.calls == 1
        )  # one batched prefill encodes the three images, then never again
    finally:
        counter.handle.remove()


def test_cached_forwards_equal_uncached_with_rollbacks(tiny_vl):
    """Incremental logits through HFSource (with rejected drafts rolled back) equal full recomputation."""
    pair, model = tiny_vl.pair, tiny_vl.backend.drafter
    reqs = [random_request(i) for i in range(3)]
    views = [encode_request(r, pair.processor, pair.tokenizer).full for r in reqs]
    src = tiny_vl.backend._source(model, views)
    y = [[] for _ in reqs]
    g = torch.Generator().manual_seed(0)
    for step in range(6):
        feed = [
            p + torch.randint(0, 900, (3,), generator=g).tolist()
            for p in src.pending(y)
        ]
        cached = src.forward(feed)  # [B, n, V]
        for r, view in enumerate(views):
            m = len(feed[r])
            ref = logits_after(model, view, y[r] + feed[r][len(src.pending(y)[r]) :], m)
            assert torch.allclose(cached[r, -m:], ref, atol=1e-4), (step, r)
        # commit a different number of the fed tokens per row; the rest is rolled back
        for r in range(3):
            y[r] += feed[r][len(src.pending(y)[r]) :][: (step + r) % 4]
        src.commit(y)
    # every committed token but the last (kept pending) is in the cache exactly once; rolled-back slots are holes
    assert isinstance(src, HFSource) and src.pending(y) == [
        (v.ids + yr)[-1:] for v, yr in zip(views, y)
    ]
    assert src.valid.sum(1).tolist() == [
        len(v.ids) + len(yr) - 1 for v, yr in zip(views, y)
    ]
    assert src.num_slots > max(len(v.ids) + len(yr) for v, yr in zip(views, y))


def test_uncached_forward_with_mask_equals_cached(tiny_vl):
    """transformers 4.57: without a mask an uncached Qwen3-VL forward reads the M-RoPE jump after the image
    as a packed-sequence boundary; the toolkit (reference.py included) always passes one."""
    pair, model = tiny_vl.pair, tiny_vl.backend.drafter
    view = encode_request(random_request(5), pair.processor, pair.tokenizer).full
    ids = torch.tensor([view.ids], device=model.device)
    kw = dict(
        pixel_values=view.pixel_values.to(model.device, model.dtype),
        image_grid_thw=view.image_grid_thw.to(model.device),
        use_cache=False,
    )
    with torch.no_grad():
        masked = model(input_ids=ids, attention_mask=torch.ones_like(ids), **kw).logits
        cached = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **{**kw, "use_cache": True},
        ).logits
    assert torch.allclose(masked, cached, atol=1e-4)
