"""Honest speed figures where a newcomer sees them: one torch thread on the CPU, a warm-up before anything is timed,
tokens/s as "× Floor", and a note when the pair's costs make a speed-up over the Floor impossible.

Why: at batch 1 on a few shared cores torch's default thread pool made tiny-model decoding 5-20x slower and
erratic, and the first method timed paid every lazy initialisation; both made AsymSpec look 10x slower than the
Floor. The bound (evals/benchmarks/speed_measure.py states it with measured costs): a speculative step costs n_d drafter
forwards and one verifier forward and emits at most K + 1 tokens, so its speed-up over the Floor is at most
(K + 1) / (n_d * r + 1), with r = c_d / c_v; here r is read from the models' parameter counts. What this module
does not know: per-call overheads, which dominate tiny models (a step of K + 1 tokens shares them), so on the
embedded pair a measured ratio can pass that bound a little; the note says so without a hard number."""

from __future__ import annotations

WARM_UP_TOKENS = 2


def set_threads(threads: int, device: str | None) -> None:
    """torch.set_num_threads(threads) when decoding runs on the CPU (threads 0: torch's default)."""
    import torch  # lazy: loads torch

    on_cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
    if threads and on_cpu:
        torch.set_num_threads(threads)


def warm_up(vl, methods: list[str], image, question: str, **request) -> None:
    """Run each method once for WARM_UP_TOKENS tokens, untimed, so no timed run pays the first-call costs."""
    for method in dict.fromkeys(methods):
        vl.generate(
            image, question, method=method, max_new_tokens=WARM_UP_TOKENS, **request
        )


def times_floor(tokens_per_s: float | None, floor_tokens_per_s: float | None) -> str:
    """ "2.1× Floor", or "" when either speed is unknown."""
    if not tokens_per_s or not floor_tokens_per_s:
        return ""
    return f"{tokens_per_s / floor_tokens_per_s:.2f}× Floor"


def cost_ratio(vl) -> float | None:
    """r = drafter / verifier parameters, None when the backend holds no models here (the vLLM backend's drafter
    and verifier are the names its engines load)."""
    drafter, verifier = (
        getattr(vl.backend, "drafter", None),
        getattr(vl.backend, "verifier", None),
    )
    if not (hasattr(drafter, "parameters") and hasattr(verifier, "parameters")):
        return None
    return sum(p.numel() for p in drafter.parameters()) / sum(
        p.numel() for p in verifier.parameters()
    )


def speedup_bound(method: str, K: int, ratio: float) -> float | None:
    """The most a method can gain over the Floor with every draft accepted; None for methods that never draft."""
    from .core.methods import METHODS  # lazy: loads torch

    m = METHODS[method]
    if not m.speculative:
        return None
    drafter_forwards = K + sum(s.model != "verifier" for s in m.scoring)
    return (K + 1) / (drafter_forwards * ratio + 1)


def impossible_speedup_note(vl, methods: list[str], K: int) -> str | None:
    """One line when the pair's costs leave speculation nothing to save over the Floor (the embedded pair:
    the drafter is as large as the verifier), for the speculative methods asked for."""
    ratio = cost_ratio(vl)
    bounds = [speedup_bound(m, K, ratio) for m in methods] if ratio is not None else []
    if not any(b is not None and b < 1.0 for b in bounds):
        return None
    return (
        f"note: the drafter has {ratio:.0%} of the verifier's parameters, so a drafter forward costs about what "
        "a verifier forward saves and speculation cannot be faster than the Floor by the paper's margin here; "
        "that needs a verifier far costlier than its drafter (Qwen3-32B for Qwen3-VL-2B: 16x), which "
        "`asymspec-vl toy heavy` writes for the toy pair"
    )
