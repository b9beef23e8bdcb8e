"""Training batches of the toy pair, built with the pair's own processor, tokenizer and chat templates:
the drafter reads x_full (image + caption + question), x_question (image + question) or x_comp (the
verifier's text view: the image dropped); the verifier reads x_comp or an arithmetic exercise. Labels
cover the answer and its end of turn (the tokenizer's EOS: <|im_end|>, or <|eot_id|> for the Llama verifier) only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..inputs.prompts import Request, build_prompts
from . import world
from .tags import tag_targets, word_token_ids

VIEWS = ("full", "question", "comp")
DATA = (
    4  # random-stream tag of per-step choices (see world.TRAIN / HELDOUT / CURRICULUM)
)
DRAFTER_STREAM, VERIFIER_STREAM, VISION_STREAM = (
    0,
    1,
    2,
)  # training-scene streams of each model


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, L] right-padded
    attention_mask: torch.Tensor  # [B, L]
    labels: torch.Tensor  # [B, L], -100 outside the answers
    pixel_values: torch.Tensor | None = None  # [num_patches, C * T * P * P]
    image_grid_thw: torch.Tensor | None = None  # [num_images, 3]
    tags: torch.Tensor | None = (
        None  # [N, 3] (row, position, digit) of the tag head (toy/tags.py)
    )

    def inputs(self) -> dict:
        d = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "labels": self.labels,
        }
        if self.pixel_values is not None:
            d.update(pixel_values=self.pixel_values, image_grid_thw=self.image_grid_thw)
        return d

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())


class Encoder:
    """Prompt and answer token ids exactly as inference builds them (prompts.build_prompts).
    processor: the drafter's Qwen3-VL processor; None for the verifier (text views only)."""

    def __init__(self, tokenizer, processor=None):
        self.processor, self.tokenizer = processor, tokenizer
        self.image_token_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.eos = (
            tokenizer.eos_token_id
        )  # the end of a chat turn (<|im_end|>, <|eot_id|>)
        self.pad = tokenizer.pad_token_id
        self.words = (
            word_token_ids(tokenizer) if processor is not None else {}
        )  # the drafter's tag head only

    def image(self, image) -> tuple[torch.Tensor, torch.Tensor]:
        """pixel_values [num_patches, D] and image_grid_thw [1, 3] of one image (the processor's own)."""
        out = self.processor.image_processor(images=[image], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def prompt_ids(self, text: str, grid: torch.Tensor | None = None) -> list[int]:
        """Token ids of a chat-template string; its <|image_pad|> repeated once per merged image token,
        as the Qwen3-VL processor does."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if grid is None:
            return ids
        n = int(grid.prod()) // self.processor.image_processor.merge_size**2
        return [t for i in ids for t in ([i] * n if i == self.image_token_id else [i])]

    def row(self, prompt_ids: list[int], answer: str) -> tuple[list[int], list[int]]:
        """(input ids, labels) of prompt + answer + EOS; the prompt is not a target."""
        ans = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [self.eos]
        return prompt_ids + ans, [-100] * len(prompt_ids) + ans

    def views(self, ex: world.ToyExample) -> dict[str, str]:
        """The chat-template strings of the three views (x_full / x_question need the processor)."""
        p = build_prompts(
            Request(True, ex.question, caption=ex.caption),
            self.processor or self.tokenizer,
            self.tokenizer,
        )
        return {"full": p.x_full, "question": p.x_question, "comp": p.x_comp}

    def text_prompt(self, question: str) -> str:
        """The verifier's chat prompt for a question with no image and no context."""
        return build_prompts(
            Request(question=question, full_context=""), self.tokenizer, self.tokenizer
        ).x_comp


def collate(
    rows: list[tuple[list[int], list[int]]], pad_id: int, images=(), tags=()
) -> Batch:
    """Right-pad (ids, labels) rows; images: (pixel_values, grid) of the rows that hold one, in row order;
    tags: (row, position, digit) triples for the tag head."""
    L = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), L), -100, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for r, (i, lab) in enumerate(rows):
        ids[r, : len(i)], labels[r, : len(lab)], mask[r, : len(i)] = (
            torch.tensor(i),
            torch.tensor(lab),
            1,
        )
    tag = torch.tensor(tags, dtype=torch.long).reshape(-1, 3) if tags else None
    if not images:
        return Batch(ids, mask, labels, tags=tag)
    return Batch(
        ids,
        mask,
        labels,
        torch.cat([p for p, _ in images]),
        torch.cat([g for _, g in images]),
        tag,
    )


def drafter_batch(
    enc: Encoder,
    seed: int,
    step: int,
    size: int,
    per_scene: int,
    view_probs: tuple[float, ...],
    qtype_probs: tuple[float, ...],
) -> Batch:
    """size rows in one randomly drawn view (one view per step keeps padding low): size / per_scene scenes,
    per_scene questions each. Image rows carry tag-head targets: the digit of every colour / shape word in their
    prompt."""
    rng = np.random.default_rng([DATA, seed, 0, step])
    view = VIEWS[int(rng.choice(len(VIEWS), p=view_probs))]
    rows, images, tags = [], [], []
    for k in range(size // per_scene):
        qtypes = tuple(
            world.QTYPES[i]
            for i in rng.choice(len(world.QTYPES), per_scene, p=qtype_probs)
        )
        examples = world.train_scene(
            seed, DRAFTER_STREAM, step * (size // per_scene) + k, qtypes
        )
        grid = None
        if view != "comp":  # the image is read once per scene
            pixels, grid = enc.image(examples[0].image())
            images += [(pixels, grid)] * len(examples)
        for ex in examples:
            prompt = enc.prompt_ids(enc.views(ex)[view], grid)
            if view != "comp":
                tags += tag_targets(prompt, len(prompt), enc.words, ex.items, len(rows))
            rows.append(enc.row(prompt, ex.answer))
    return collate(
        rows, enc.pad, images, tags
    )  # images in row order: how Qwen3-VL scatters them


def verifier_batch(
    enc: Encoder, seed: int, step: int, size: int, per_scene: int, curriculum: float
) -> Batch:
    """size rows of the verifier's view: x_comp of toy questions or (a share `curriculum` of the steps)
    arithmetic exercises with both operands in the question (one kind per step keeps padding low)."""
    rng = np.random.default_rng([DATA, seed, 1, step])
    if rng.random() < curriculum:
        arith = np.random.default_rng([world.CURRICULUM, seed, step])
        rows = []
        for _ in range(size):
            question, answer = world.arithmetic_example(arith)
            rows.append(enc.row(enc.prompt_ids(enc.text_prompt(question)), answer))
        return collate(rows, enc.pad)
    rows = []
    for k in range(-(-size // per_scene)):
        for ex in world.train_scene(
            seed, VERIFIER_STREAM, step * size + k, (None,) * per_scene
        ):
            rows.append(enc.row(enc.prompt_ids(enc.views(ex)["comp"]), ex.answer))
    return collate(rows[:size], enc.pad)
