"""c_v(K + 1): what the verifier's forward over K + 1 new tokens a row costs beside its forward over one.

The bound (speed_measure.py) prices a speculative step's verification at c_v, the Floor's cost of a step, as if a
forward over K + 1 tokens cost what a forward over one does. On a GPU at small batch the two are close (the forward
reads the weights once, whatever the few tokens); on a CPU the work grows with the tokens. Measured here on the
verifier folder itself with transformers: a KV cache of CONTEXT tokens a row, then a forward over n new tokens a
row, the cache cut back after each, fastest of REPEATS (one torch thread, as bench_speed runs). The step's other
costs (the loop, the cache commits) do not grow with n, so the verification of a step of K drafts costs
c_v(K + 1) = c_v + forward(K + 1) - forward(1).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

CONTEXT = (
    96  # tokens a row before the timed forward: about a toy prompt and half its answer
)
# timed forwards per width, the fastest kept: one forward takes a few ms to 0.1 s, and 2 let a burst of load on a
# shared machine through (262 ms at 3 tokens against 134 ms at 5 in one run)
REPEATS = 10


def forward_seconds(
    folder: Path, batch: int, widths: list[int], repeats: int = REPEATS
) -> dict[int, float]:
    """{n: fastest seconds of the verifier's forward over n new tokens a row} at `batch` rows (CPU time)."""
    from transformers import AutoModelForCausalLM  # lazy: loads transformers

    model = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32
    ).eval()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(vocab, (batch, CONTEXT), generator=gen)  # [B, CONTEXT]
    best = {}
    with torch.inference_mode():
        cache = model(prompt, use_cache=True).past_key_values
        for n in dict.fromkeys([1, *widths]):
            new = torch.randint(vocab, (batch, n), generator=gen)  # [B, n]
            times = []
            for _ in range(repeats + 1):  # the first run warms the width up, untimed
                start = time.process_time()
                model(new, past_key_values=cache, use_cache=True)
                times.append(time.process_time() - start)
                cache.crop(CONTEXT)
            best[n] = min(times[1:])
    return best


def wide_verifier_cost(c_v: float, forward_s: dict[int, float], width: int) -> float:
    """c_v(width): the Floor's step cost c_v with the forward over one token replaced by the forward over `width`."""
    return c_v + forward_s[width] - forward_s[1]
