"""toy/vision.py: the slot heads' shapes, the vision batch's per-cell targets against the scenes' items (one merged
image token per cell), the slot accuracy per column, and pretrain_vision on a tiny random Qwen3-VL with the
embedded drafter's processor: it trains the vision tower (and only it) and reports held-out accuracy."""

import pytest
import torch
from transformers import AutoProcessor

from asymspec_vl.toy import PAIR_DIR, world
from asymspec_vl.toy.batches import VISION_STREAM, Encoder
from asymspec_vl.toy.draw import COLOURS, SHAPES
from asymspec_vl.toy.tiny import TinySizes, vl_model
from asymspec_vl.toy.vision import (
    COLOUR_IDS,
    SHAPE_IDS,
    SlotHeads,
    pretrain_vision,
    slot_accuracy,
    training_scenes,
    vision_batch,
)


@pytest.fixture(scope="module")
def enc():
    processor = AutoProcessor.from_pretrained(PAIR_DIR / "drafter")
    return Encoder(processor.tokenizer, processor)


def test_slot_heads_give_colour_shape_and_digit_logits():
    heads = SlotHeads(16)
    colour, shape, digit = heads(torch.randn(5, 16))
    assert (
        colour.shape == (5, len(COLOURS))
        and shape.shape == (5, len(SHAPES))
        and digit.shape == (5, 10)
    )
    assert COLOUR_IDS == {c: i for i, c in enumerate(COLOURS)} and SHAPE_IDS == {
        s: i for i, s in enumerate(SHAPES)
    }


def test_training_scenes_are_the_vision_streams_scenes():
    scenes = training_scenes(seed=3, step=2, size=4)
    assert [s.uid for s in scenes] == [
        world.train_scene(3, VISION_STREAM, 2 * 4 + k, ("read",))[0].uid
        for k in range(4)
    ]
    assert (
        len({s.uid for s in scenes + training_scenes(3, 3, 4)}) == 8
    )  # the next step: other scenes


def test_vision_batch_targets_each_cell_of_each_scene(enc):
    scenes = world.heldout(3)
    pixels, grids, targets = vision_batch(enc, scenes)
    assert grids.shape == (3, 3) and pixels.shape[0] == int(grids.prod(-1).sum())
    merged = grids.prod(-1) // 4  # spatial merge 2 x 2
    assert merged.tolist() == [world.NUM_ITEMS] * 3  # one merged token per cell
    assert targets.tolist() == [
        [list(COLOURS).index(it.colour), list(SHAPES).index(it.shape), it.digit]
        for ex in scenes
        for it in ex.items
    ]


def test_slot_accuracy_scores_each_column_against_its_own_target():
    targets = torch.tensor(
        [[0, 1, 2], [3, 0, 9], [5, 3, 4], [1, 2, 0]]
    )  # [N, 3] colour, shape, digit

    def one_hot(column, n, wrong=()):
        out = torch.nn.functional.one_hot(targets[:, column], n).float()
        for row in wrong:
            out[row] = out[row].roll(1)
        return out

    def heads(emb):  # two shapes and one digit wrong
        return one_hot(0, 6), one_hot(1, 4, wrong=[0, 1]), one_hot(2, 10, wrong=[3])

    def visual(pixels, grid_thw):
        return (pixels,)

    acc = slot_accuracy(visual, heads, (torch.zeros(4, 2), None, targets))
    assert acc == {"colour": 1.0, "shape": 0.5, "digit": 0.75}


def test_pretrain_vision_trains_the_tower_only_and_reports_heldout_accuracy(enc):
    sizes = TinySizes(
        hidden=32,
        layers=1,
        heads=2,
        kv_heads=1,
        head_dim=16,
        intermediate=64,
        vision_hidden=32,
    )
    model = vl_model(enc.tokenizer, sizes, seed=0, wide_init=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    log = []
    acc = pretrain_vision(model, enc, seed=0, steps=3, batch=2, lr=1e-3, log=log)
    assert set(acc) == {"colour", "shape", "digit"} and all(
        0 <= v <= 1 for v in acc.values()
    )
    assert log[-1] == {"stage": "vision", "heldout_accuracy": acc}
    assert [r["step"] for r in log[:-1]] == [0, 2] and all(
        r["stage"] == "vision" for r in log
    )
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("model.visual.") for n in changed)
    assert not model.model.visual.training
