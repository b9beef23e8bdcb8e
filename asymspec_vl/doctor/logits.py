"""Checks of `asymspec-vl doctor`: the drafter's logits in vLLM against transformers' on the same tokens, a on
x_full and b on x_comp (the two terms of δ = a − b and the gate's p_b), over the first proposals of each request.

Tokens can agree while logits are wrong (a greedy argmax absorbs small damage), and in bf16 tokens need not agree
at all, so these are the checks that hold a bf16 backend to account: attention planned for the wrong model's heads,
or a drafter pass that reads the next pass's metadata, is off by the logits' own size, far above bf16 rounding.
The prompts are long (about a thousand tokens) so that on a GPU the host builds pass k+1 while pass k still runs.
"""

from __future__ import annotations

from ..core.config import AsymSpecConfig
from ..core.limits import LIMITS
from ..inputs.prompts import Request, encode_request
from .backends import AttentionRun
from .cases import Check, requests

BF16_LOGIT_TOLERANCE = (
    0.05  # max |vLLM - transformers| / max |transformers| accepted in bf16
)
FP32_LOGIT_TOLERANCE = 1e-4
LONG_TEXT_WORDS = 600


def long_requests():
    """Two image requests and a text-only one whose prompts run to about a thousand tokens."""

    words = "the chart shows the value of each bar and the total of the left and right side".split()
    text = " ".join(
        words[i % len(words)] + (f" {i}" if i % 7 == 0 else "")
        for i in range(LONG_TEXT_WORDS)
    )
    image_reqs = [
        Request(r.image, r.question, caption=text, ocr=r.ocr) for r in requests()[1:3]
    ]
    return image_reqs + [
        Request(
            question="What is the total?",
            full_context=text,
            compressed_context=text[:200],
        )
    ]


def logits_checks(
    vl,
    hf,
    run: AttentionRun,
    K: int = LIMITS.speculative_tokens,
    max_new_tokens: int = 24,
) -> list[Check]:
    """Capture a and b of the first proposals of long requests in vLLM, recompute each with transformers."""
    from vllm_patches.probes import probe  # lazy: loads torch

    reqs = long_requests()
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", K)[0])
    probe.capture_full_view_logits(llm)
    try:
        vl.generate_batch(
            reqs, "asymspec", AsymSpecConfig(K=K, max_new_tokens=max_new_tokens)
        )
        captured = {c["x_full"]: c for c in probe.captured_proposals(llm).values()}
    finally:
        probe.capture_full_view_logits(llm, on=False)
    drafter = hf.backend.drafter
    worst_a, worst_b, n_a, n_b, missing = 0.0, 0.0, 0, 0, 0
    for r in reqs:
        enc = encode_request(r, vl.pair.processor, vl.pair.tokenizer)
        c = captured.get(tuple(enc.full.ids))
        if c is None or not c["a"] or not c["b"]:
            missing += 1
            continue
        reads_image = (
            c["view"] == tuple(enc.full.ids) and enc.full.pixel_values is not None
        )  # (the length gate)
        image = enc.full if reads_image else None
        for p in c["a"]:
            ids = list(c["view"]) + p["y"] + p["drafts"][:-1]
            worst_a = max(
                worst_a,
                relative_difference(
                    p["a"], drafter_logits(drafter, ids, image, len(p["a"]))
                ),
            )
            n_a += 1
        for p in c["b"]:
            worst_b = max(
                worst_b,
                relative_difference(
                    p["b"], drafter_logits(drafter, p["tokens"], None, len(p["b"]))
                ),
            )
            n_b += 1
    tolerance = FP32_LOGIT_TOLERANCE if run.exact else BF16_LOGIT_TOLERANCE
    lengths = "/".join(
        str(len(encode_request(r, vl.pair.processor, vl.pair.tokenizer).full.ids))
        for r in reqs
    )
    out = []
    for name, worst, n in (
        ("drafter x_full logits a", worst_a, n_a),
        ("drafter x_comp logits b", worst_b, n_b),
    ):
        detail = (
            f"max relative difference {worst:.2e} (tolerance {tolerance:g}) over {n} proposals of "
            f"{len(reqs)} requests, x_full {lengths} tokens"
        )
        if missing:
            out.append(
                Check.of(
                    name,
                    run.label,
                    False,
                    f"{missing} request(s) recorded no a or no b; " + detail,
                )
            )
        else:
            out.append(Check.of(name, run.label, worst <= tolerance, detail))
    return out


def relative_difference(got, ref) -> float:
    return float((got.float() - ref).abs().max() / ref.abs().max())


def drafter_logits(drafter, ids: list[int], image, n: int):
    """transformers' drafter on ids (with the view's image when given): the logits of the last n positions
    [n, V], float32 on the host."""
    import torch  # lazy: loads torch

    x = torch.tensor([ids], device=drafter.device)
    kwargs = {}
    if image is not None:
        kwargs = dict(
            pixel_values=image.pixel_values.to(drafter.device, drafter.dtype),
            image_grid_thw=image.image_grid_thw.to(drafter.device),
        )
    with torch.no_grad():
        return (
            drafter(input_ids=x, attention_mask=torch.ones_like(x), **kwargs)
            .logits[0, -n:]
            .float()
            .cpu()
        )
