"""The next-token training loop shared by the toy drafter and verifier (AdamW, warm-up + cosine decay)."""

from __future__ import annotations

import math
import time
from typing import Callable

import torch
from tqdm import tqdm

from .data import Batch


def warmup_cosine(step: int, total: int, warmup: int, floor: float = 0.05) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to `floor`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train_lm(model, make_batch: Callable[[int], Batch], steps: int, lr: float, log: list, name: str,
             warmup: int = 100, log_every: int = 50, position: int = 0) -> float:
    """Train `model` on make_batch(step) for `steps` steps; append log records; return the final mean loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, steps, warmup))
    t0, c0 = time.perf_counter(), time.process_time()
    tokens, recent = 0, []
    model.train()
    bar = tqdm(range(steps), desc=name, position=position, leave=True, dynamic_ncols=True)
    for step in bar:
        batch = make_batch(step)
        loss = model(**batch.inputs(), use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        tokens += batch.num_tokens
        recent = (recent + [loss.item()])[-log_every:]
        if (step + 1) % log_every == 0 or step == steps - 1:
            mean = sum(recent) / len(recent)
            bar.set_postfix(loss=f"{mean:.3f}")
            log.append({"stage": name, "step": step + 1, "loss": round(mean, 4), "lr": sched.get_last_lr()[0],
                        "tokens": tokens, "wall_s": round(time.perf_counter() - t0, 1),
                        "cpu_s": round(time.process_time() - c0, 1)})
    model.eval()
    return sum(recent) / max(1, len(recent))
