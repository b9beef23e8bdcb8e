"""Algorithm 1 from scratch: every forward re-reads the whole prompt (no KV cache), one request at a time.

The reference the cached loop must match token for token, and the baseline of the step-time benchmark.
The models compute their own positions (Qwen3-VL: transformers' M-RoPE from the full prompt each time).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...core.config import AsymSpecConfig
from ...core.gate import asymspec_step, greedy
from ...inputs.prompts import EncodedView


@torch.no_grad()
def logits_after(model, view: EncodedView, extra: list[int], n: int) -> torch.Tensor:
    """Logits at the last n positions of view + extra, recomputed from nothing. -> [n, V]."""
    ids = torch.tensor([view.ids + extra], device=model.device)
    kwargs = {}
    if view.pixel_values is not None:
        kwargs = {
            "pixel_values": view.pixel_values.to(model.device, model.dtype),
            "image_grid_thw": view.image_grid_thw.to(model.device),
        }
    out = model(
        input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, **kwargs
    )
    return out.logits[0, -n:]


def reference_asymspec(
    drafter,
    verifier,
    full: EncodedView,
    comp: EncodedView,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None,
    stop_ids: set[int],
    max_new: int,
    on_step: Callable[[list[int]], None] | None = None,
) -> list[int]:
    """Generated token ids of one request by Algorithm 1 with every forward recomputed.
    on_step(y) is called after every speculation step (for timing)."""
    y: list[int] = []
    K = cfg.K
    while True:
        drafts: list[int] = []
        a = []
        for i in range(
            K + (cfg.bonus == "fused")
        ):  # line 5: a_1..a_K (a_{K+1} for the fused bonus)
            a.append(logits_after(drafter, full, y + drafts, 1)[0])
            if i < K:
                drafts.append(int(greedy(a[-1], banned)))
        b = logits_after(drafter, comp, y + drafts, K + 1)  # line 6: [K+1, V]
        t = logits_after(verifier, comp, y + drafts, K + 1)  # line 7: [K+1, V]
        if len(a) == K:
            a.append(b[-1])  # a_{K+1} is not read by the verifier bonus
        d = torch.tensor([drafts], device=t.device)
        out = asymspec_step(torch.stack(a)[None], b[None], t[None], d, cfg, banned)
        for tok in out.committed(d)[0]:  # lines 13-24
            y.append(tok)
            if tok in stop_ids or len(y) >= max_new:
                return y
        if on_step:
            on_step(y)
