"""The cross-family rules from scratch (the oracle of core/vocab_align.py): one row at a time, plain Python
floats and dicts, no library function. pairs: {verifier id: drafter id} of the shared set."""

from __future__ import annotations

import math


def _log_softmax(x: list[float]) -> list[float]:
    m = max(x)
    z = m + math.log(sum(math.exp(v - m) for v in x if v != -math.inf))
    return [v - z for v in x]


def _divergence(la: list[float], lb: list[float], kind: str) -> float:
    p, q = [math.exp(v) for v in la], [math.exp(v) for v in lb]
    if kind == "kl":
        return max(0.0, sum(x * (u - w) for x, u, w in zip(p, la, lb) if x > 0))
    m = [(x + y) / 2 for x, y in zip(p, q)]
    val = 0.5 * sum(x * math.log(x / z) for x, z in zip(p, m) if x > 0) + 0.5 * sum(
        y * math.log(y / z) for y, z in zip(q, m) if y > 0
    )
    return min(max(val, 0.0), math.log(2))


def _argmax_shared(score: dict[int, float], banned: set[int]) -> int:
    """Highest score over the shared verifier ids not banned; ties -> the lowest verifier id."""
    best = None
    for j in sorted(score):
        if j in banned:
            continue
        if best is None or score[j] > score[best]:
            best = j
    return best


def asymspec_row(
    a, b, t, drafts, pairs: dict[int, int], cfg, banned: set[int] = frozenset()
):
    """(accepted, emitted verifier id) of one row. a, b: K+1 drafter-logit lists; t: K+1 verifier-logit lists;
    drafts: K verifier ids."""
    K = len(drafts)
    n = 0
    for i in range(K):
        la, lb, lt = _log_softmax(a[i]), _log_softmax(b[i]), _log_softmax(t[i])
        dv = drafts[i]
        dd = pairs[dv]
        if cfg.gate == "fixed":
            lg = math.log(cfg.gamma)
        elif cfg.gate == "lambda":
            lg = math.log(cfg.gamma) - cfg.lam * (la[dd] - lb[dd])
        else:
            lg = math.log(cfg.gamma) - _divergence(
                la, lb, "kl" if cfg.gate == "kl" else "jsd"
            )
        if not lt[dv] > lg + lb[dd]:
            break
        n += 1
    ap, bp, tp = a[n], b[n], t[n]
    if cfg.delta_source == "contrastive":
        delta = {j: ap[d] - bp[d] for j, d in pairs.items()}
    elif cfg.delta_source == "raw":
        delta = {j: ap[d] for j, d in pairs.items()}
    else:
        delta = {j: tp[j] - bp[d] for j, d in pairs.items()}
    fused = _argmax_shared({j: tp[j] + cfg.beta * delta[j] for j in pairs}, banned)
    if n == K and cfg.bonus != "fused":
        return n, _argmax_shared({j: tp[j] for j in pairs}, banned)
    return n, fused


def sd_row(t, drafts, pairs: dict[int, int], banned: set[int] = frozenset()):
    """Greedy token-level-intersection SD (Floor with no drafts): (accepted, emitted verifier id)."""
    n = 0
    for i, dv in enumerate(drafts):
        if _argmax_shared({j: t[i][j] for j in pairs}, banned) != dv:
            break
        n += 1
    return n, _argmax_shared({j: t[n][j] for j in pairs}, banned)


def scd_row(b, t, drafts, pairs: dict[int, int], cfg, banned: set[int] = frozenset()):
    """SCD across the map: (1 + beta) log p_t - beta log p_b (b's own full softmax) on the plausible shared set."""

    def target(i):
        lt, lb = _log_softmax(t[i]), _log_softmax(b[i])
        top = max(lt[j] for j in pairs)  # banned shared tokens count for the cut
        return {
            j: ((1 + cfg.beta) * lt[j] - cfg.beta * lb[d])
            if lt[j] >= math.log(cfg.scd_alpha) + top
            else -math.inf
            for j, d in pairs.items()
        }

    n = 0
    for i, dv in enumerate(drafts):
        if _argmax_shared(target(i), banned) != dv:
            break
        n += 1
    return n, _argmax_shared(target(n), banned)
