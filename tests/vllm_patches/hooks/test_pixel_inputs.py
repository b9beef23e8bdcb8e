"""vllm_patches/hooks/pixel_inputs.py: the drafter alone's image enters its engine as the transformers processor's
pixels and is embedded on the worker; nothing travels back to the client (it used to: an RPC ran the vision tower
and returned the embeddings, which the client sent into the engine again)."""

import pytest
import torch
from helpers import random_request

from vllm_patches.hooks.pixel_inputs import patch_pixel_inputs

pytestmark = pytest.mark.vllm

MERGE = 2  # the Qwen-VL drafters' spatial merge size


def parser():
    from vllm.model_executor.models.qwen2_vl import Qwen2VLMultiModalDataParser

    patch_pixel_inputs()
    return Qwen2VLMultiModalDataParser(MERGE)


def test_a_dict_of_pixels_parses_into_vllms_items_one_per_image():
    grid = torch.tensor([[1, 4, 4], [1, 2, 6]])  # 16 and 12 patches
    items = parser()._parse_image_data(
        {"pixel_values": torch.rand(28, 1536), "image_grid_thw": grid}
    )
    assert items.get_count() == 2
    first, second = items.get(0), items.get(1)
    assert (first["pixel_values"].shape, second["pixel_values"].shape) == (
        (16, 1536),
        (12, 1536),
    )
    assert torch.equal(second["image_grid_thw"], grid[1])


def test_embeddings_and_images_still_parse_as_vllm_parses_them():
    from PIL import Image

    p = parser()
    embeds = p._parse_image_data(
        {"image_embeds": torch.rand(7, 8), "image_grid_thw": torch.tensor([[1, 2, 14]])}
    )
    assert embeds.get_count() == 1 and set(embeds.get(0)) == {
        "image_embeds",
        "image_grid_thw",
    }
    assert p._parse_image_data([Image.new("RGB", (8, 8))]).get_count() == 1


def test_the_drafter_alone_sends_pixels_and_no_embeddings_come_back(
    tiny_models, tiny_vl, monkeypatch
):
    """The drafter-alone engine gets the request's pixels, makes no RPC, and answers the transformers tokens."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from asymspec_vl.inputs.prompts import encode_request

    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        block_size=16,
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=8)
    reqs = [random_request(s) for s in (1, 2)]
    try:
        plan = vl.backend.plan_request("drafter", cfg)
        llm = vl.backend.engine(plan.engine)
        rpcs = []
        stock_rpc = llm.collective_rpc
        monkeypatch.setattr(
            llm,
            "collective_rpc",
            lambda name, **kw: rpcs.append(name) or stock_rpc(name, **kw),
        )
        enc = encode_request(reqs[0], vl.pair.processor, vl.pair.tokenizer)
        prompt, _ = vl.backend.engine_request(enc, plan)
        image = prompt["multi_modal_data"]["image"]
        assert set(image) == {"pixel_values", "image_grid_thw"}
        assert image["pixel_values"] is enc.question.pixel_values
        got = vl.generate_batch(reqs, "drafter", cfg)
        assert rpcs == []
    finally:
        vl.close()
    want = tiny_vl.generate_batch(reqs, "drafter", cfg)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
