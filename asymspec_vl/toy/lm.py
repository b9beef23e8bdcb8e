"""The next-token training loop shared by the toy drafter and verifier (AdamW, warm-up + cosine decay)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

from .batches import Batch


def warmup_cosine(step: int, total: int, warmup: int, floor: float = 0.05) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to `floor`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train_lm(
    model,
    make_batch: Callable[[int], Batch],
    steps: int,
    lr: float,
    log: list,
    name: str,
    warmup: int = 100,
    log_every: int = 50,
    position: int = 0,
    lr_scale: Callable[[str], float] | None = None,
    tag_head=None,
    tag_weight: float = 1.0,
) -> float:
    """Train `model` on make_batch(step) for `steps` steps; append log records; return the final mean
    next-token loss. lr_scale(parameter name) -> multiplier of lr for that parameter (e.g. a slower
    pretrained vision tower); tag_head: a tags.TagHead trained along on batches that carry tags."""
    groups: dict[float, list] = {}
    for pname, p in model.named_parameters():
        groups.setdefault(lr_scale(pname) if lr_scale else 1.0, []).append(p)
    if tag_head is not None:
        groups.setdefault(1.0, []).extend(tag_head.parameters())
    opt = torch.optim.AdamW(
        [{"params": ps, "lr": lr * k} for k, ps in groups.items()],
        lr=lr,
        betas=(0.9, 0.98),
        weight_decay=0.01,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_cosine(s, steps, warmup)
    )
    t0, c0 = time.perf_counter(), time.process_time()
    tokens, recent, recent_tag = 0, [], []
    model.train()
    bar = tqdm(
        range(steps), desc=name, position=position, leave=True, dynamic_ncols=True
    )
    for step in bar:
        batch = make_batch(step)
        tagged = tag_head is not None and batch.tags is not None and len(batch.tags) > 0
        out = model(**batch.inputs(), use_cache=False, output_hidden_states=tagged)
        loss = out.loss
        if tagged:
            tag_loss = tag_head.loss(out.hidden_states, batch.tags)
            recent_tag = (recent_tag + [tag_loss.item()])[-log_every:]
            loss = loss + tag_weight * tag_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(
            [p for g in opt.param_groups for p in g["params"]], 1.0
        )
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        tokens += batch.num_tokens
        recent = (recent + [out.loss.item()])[-log_every:]
        if (step + 1) % log_every == 0 or step == steps - 1:
            mean = sum(recent) / len(recent)
            bar.set_postfix(loss=f"{mean:.3f}")
            tag = (
                {"tag_loss": round(sum(recent_tag) / len(recent_tag), 4)}
                if recent_tag
                else {}
            )
            log.append(
                {
                    "stage": name,
                    "step": step + 1,
                    "loss": round(mean, 4),
                    **tag,
                    "lr": sched.get_last_lr()[0],
                    "tokens": tokens,
                    "wall_s": round(time.perf_counter() - t0, 1),
                    "cpu_s": round(time.process_time() - c0, 1),
                }
            )
    model.eval()
    return sum(recent) / max(1, len(recent))
