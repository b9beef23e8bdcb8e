"""Vision-tower pretraining of the toy drafter: classification heads on each merged image token (one per
cell: colour, shape, digit) teach the tower to read before the drafter learns to answer. A drafter
trained from scratch by next-token loss alone never learned to read the image (see the feasibility notes)."""

from __future__ import annotations

import time

import torch
from torch import nn
from tqdm import tqdm

from . import world
from .batches import VISION_STREAM, Encoder
from .draw import COLOURS, SHAPES

COLOUR_IDS = {c: i for i, c in enumerate(COLOURS)}
SHAPE_IDS = {s: i for i, s in enumerate(SHAPES)}


class SlotHeads(nn.Module):
    """Per-token linear classifiers over merged image embeddings [N, D] -> colour, shape, digit logits."""

    def __init__(self, dim: int):
        super().__init__()
        self.colour, self.shape, self.digit = (
            nn.Linear(dim, len(COLOURS)),
            nn.Linear(dim, len(SHAPES)),
            nn.Linear(dim, 10),
        )

    def forward(
        self, emb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            self.colour(emb),
            self.shape(emb),
            self.digit(emb),
        )  # [N, 6], [N, 4], [N, 10]


def vision_batch(enc: Encoder, examples: list[world.ToyExample]):
    """pixel_values, image_grid_thw and per-cell targets [len * NUM_ITEMS, 3] (colour, shape, digit)."""
    pixels, grids, targets = [], [], []
    for ex in examples:
        p, g = enc.image(ex.image())
        pixels.append(p)
        grids.append(g)
        targets += [
            (COLOUR_IDS[it.colour], SHAPE_IDS[it.shape], it.digit) for it in ex.items
        ]
    return torch.cat(pixels), torch.cat(grids), torch.tensor(targets)


def training_scenes(seed: int, step: int, size: int) -> list[world.ToyExample]:
    return [
        world.train_scene(seed, VISION_STREAM, step * size + k, ("read",))[0]
        for k in range(size)
    ]


def slot_accuracy(visual, heads: SlotHeads, batch) -> dict[str, float]:
    pixels, grid, targets = batch
    with torch.no_grad():
        logits = heads(visual(pixels, grid_thw=grid)[0])
    return {
        name: float((lg.argmax(-1) == targets[:, i]).float().mean())
        for i, (name, lg) in enumerate(zip(("colour", "shape", "digit"), logits))
    }


def pretrain_vision(
    model,
    enc: Encoder,
    seed: int,
    steps: int,
    batch: int,
    lr: float,
    log: list,
    position: int = 0,
) -> dict[str, float]:
    """Train model.visual (+ throw-away slot heads) for `steps` steps; return held-out slot accuracy."""
    visual = model.model.visual
    torch.manual_seed(seed)
    heads = SlotHeads(visual.merger.linear_fc2.out_features)
    params = list(visual.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=steps, pct_start=0.1
    )
    held = vision_batch(
        enc, world.heldout(256)
    )  # the eval's held-out scenes: never trained on
    ce = nn.CrossEntropyLoss()
    t0, c0 = time.perf_counter(), time.process_time()
    visual.train()
    bar = tqdm(
        range(steps),
        desc="vision tower",
        position=position,
        leave=True,
        dynamic_ncols=True,
    )
    for step in bar:
        pixels, grid, targets = vision_batch(enc, training_scenes(seed, step, batch))
        logits = heads(visual(pixels, grid_thw=grid)[0])
        loss = sum(ce(lg, targets[:, i]) for i, lg in enumerate(logits))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == steps - 1:
            bar.set_postfix(loss=f"{loss.item():.3f}")
            log.append(
                {
                    "stage": "vision",
                    "step": step,
                    "loss": round(loss.item(), 4),
                    "wall_s": round(time.perf_counter() - t0, 1),
                    "cpu_s": round(time.process_time() - c0, 1),
                }
            )
    visual.eval()
    acc = slot_accuracy(visual, heads, held)
    log.append({"stage": "vision", "heldout_accuracy": acc})
    return acc
