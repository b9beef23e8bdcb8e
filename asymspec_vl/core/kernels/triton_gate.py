"""Fused Triton kernels of the AsymSpec gate and delta-fusion: gate.asymspec_step over rows of logits.

Three launches per step (R rows of [V] logits per tensor, each row split into NC chunks):
  1. _stats_kernel      (R, NC): one read of a, b, t: per chunk max / sum-exp of a, b, t (log-sum-exp
                        partials), the chunk's argmax of t + beta*delta (banned -> -inf, ties -> lowest id)
                        and argmax of t. Every row gets both argmaxes: the emitted position is unknown yet.
  2. _divergence_kernel (R, NC): second read of a, b: the chunk's JSD (or KL) terms, with the row's lse.
                        JSD needs the normalisers first, so it cannot share the first read.
  3. _decide_kernel     (num_reqs): per request: p_t(d), p_b(d) (and p_a(d)) at each draft, the gate
                        test log p_t(d) > log gamma_eff + log p_b(d), the first rejection, and the token
                        (fused argmax there, or argmax t at the bonus position).
Semantics are those of gate.py (float32 maths, delta NaN -> 0, fused NaN -> -inf, JSD clamped to
[0, ln 2]); logits must be finite or -inf (no NaN / +inf). Row layouts: core/kernels/layout.py.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import torch
import triton
import triton.language as tl

from .interpreter import check_numpy

GATE_IDS = {"cda": 0, "fixed": 1, "lambda": 2, "kl": 3}
DELTA_IDS = {"contrastive": 0, "raw": 1, "scd": 2}
NF = 8  # float partials per (row, chunk): max/sumexp of a, b, t; best fused value; best t value
IDX_MAX = tl.constexpr(2**31 - 1)  # "no index" in argmax partials
FLT_MAX = tl.constexpr(
    3.4028234663852886e38
)  # torch.nan_to_num's replacement of +-inf in float32


@triton.jit
def _lse_update(m, s, x):
    """Online log-sum-exp: running max m and sum s of exp(x - m), updated with a block x."""
    m_new = tl.maximum(m, tl.max(x, 0))
    safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), 0)


@triton.jit
def _argmax_update(best, best_i, x, base):
    """Running (value, index) argmax over blocks; a later block wins only if strictly larger."""
    v, i = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
    up = v > best
    return tl.where(up, v, best), tl.where(up, base + i, best_i)


@triton.jit
def _lse_of_parts(m, s, AXIS: tl.constexpr):
    """log-sum-exp of a row from its chunk partials (max m, sum s of exp(x - m)) along AXIS."""
    M = tl.max(m, AXIS)
    safe = tl.where(M == float("-inf"), 0.0, M)
    return safe + tl.log(tl.sum(s * tl.exp(m - tl.expand_dims(safe, AXIS)), AXIS))


@triton.jit
def _stats_kernel(
    a_ptr,
    b_ptr,
    t_ptr,
    banned_ptr,
    fpart_ptr,
    ipart_ptr,
    V,
    P,
    sa0,
    sa1,
    sb0,
    sb1,
    st0,
    st1,
    beta,
    chunk,
    NC,
    BLOCK: tl.constexpr,
    DELTA: tl.constexpr,
    BETA_ZERO: tl.constexpr,
    HAS_BANNED: tl.constexpr,
    T_ARGMAX: tl.constexpr,
):
    r = tl.program_id(0)  # row: position r % P of batch entry r // P
    c = tl.program_id(1)  # chunk of the vocabulary
    rb, rp = (r // P).to(tl.int64), (r % P).to(tl.int64)
    a_row, b_row, t_row = (
        a_ptr + rb * sa0 + rp * sa1,
        b_ptr + rb * sb0 + rp * sb1,
        t_ptr + rb * st0 + rp * st1,
    )
    lo = c * chunk
    offs = tl.arange(0, BLOCK)
    ninf = tl.full([], float("-inf"), tl.float32)
    zero = tl.zeros([], tl.float32)
    ma, sa, mb, sb, mt, st, fv, tv = ninf, zero, ninf, zero, ninf, zero, ninf, ninf
    fi, ti = lo, lo
    for k in range(0, chunk, BLOCK):
        cols = lo + k + offs
        mask = cols < V
        a = tl.load(a_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        b = tl.load(b_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        t = tl.load(t_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        ma, sa = _lse_update(ma, sa, a)
        mb, sb = _lse_update(mb, sb, b)
        mt, st = _lse_update(mt, st, t)
        if BETA_ZERO:
            fused = t  # beta = 0: exactly t
        else:
            if DELTA == 0:
                delta = a - b  # contrastive (Eq. 1)
            elif DELTA == 1:
                delta = a  # raw
            else:
                delta = t - b  # scd
            delta = tl.where(delta != delta, 0.0, delta)  # -inf - -inf -> 0
            fused = t + beta * delta  # Eq. 2
            fused = tl.where(fused != fused, float("-inf"), fused)  # inf - inf -> -inf
        tt = t
        if HAS_BANNED:
            ban = tl.load(banned_ptr + cols, mask=mask, other=0) != 0
            fused = tl.where(ban, float("-inf"), fused)
            tt = tl.where(ban, float("-inf"), t)
        fv, fi = _argmax_update(fv, fi, fused, lo + k)
        if T_ARGMAX:
            tv, ti = _argmax_update(tv, ti, tt, lo + k)
    out = fpart_ptr + (r * NC + c) * 8
    tl.store(out + 0, ma)
    tl.store(out + 1, sa)
    tl.store(out + 2, mb)
    tl.store(out + 3, sb)
    tl.store(out + 4, mt)
    tl.store(out + 5, st)
    tl.store(out + 6, fv)
    tl.store(out + 7, tv)
    tl.store(ipart_ptr + (r * NC + c) * 2, fi)
    tl.store(ipart_ptr + (r * NC + c) * 2 + 1, ti)


@triton.jit
def _divergence_kernel(
    a_ptr,
    b_ptr,
    fpart_ptr,
    dpart_ptr,
    V,
    P,
    sa0,
    sa1,
    sb0,
    sb1,
    chunk,
    NC,
    BLOCK: tl.constexpr,
    NC_P2: tl.constexpr,
    KL: tl.constexpr,
):
    r = tl.program_id(0)
    c = tl.program_id(1)
    rb, rp = (r // P).to(tl.int64), (r % P).to(tl.int64)
    a_row, b_row = a_ptr + rb * sa0 + rp * sa1, b_ptr + rb * sb0 + rp * sb1
    cc = tl.arange(0, NC_P2)
    parts = fpart_ptr + (r * NC + cc) * 8
    lse_a = _lse_of_parts(
        tl.load(parts, mask=cc < NC, other=float("-inf")),
        tl.load(parts + 1, mask=cc < NC, other=0.0),
        0,
    )
    lse_b = _lse_of_parts(
        tl.load(parts + 2, mask=cc < NC, other=float("-inf")),
        tl.load(parts + 3, mask=cc < NC, other=0.0),
        0,
    )
    lo = c * chunk
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for k in range(0, chunk, BLOCK):
        cols = lo + k + offs
        mask = cols < V
        lp = (
            tl.load(a_row + cols, mask=mask, other=float("-inf")).to(tl.float32) - lse_a
        )  # log p
        lq = (
            tl.load(b_row + cols, mask=mask, other=float("-inf")).to(tl.float32) - lse_b
        )  # log q
        p, q = tl.exp(lp), tl.exp(lq)
        if KL:
            acc += tl.where(p > 0, p * (lp - lq), 0.0)  # KL(p || q) terms
        else:  # log m = logaddexp(log p, log q) - ln 2
            hi, low = tl.maximum(lp, lq), tl.minimum(lp, lq)
            lm = (
                tl.where(hi == float("-inf"), hi, hi + tl.log(1.0 + tl.exp(low - hi)))
                - 0.6931471805599453
            )
            acc += tl.where(p > 0, p * (lp - lm), 0.0) + tl.where(
                q > 0, q * (lq - lm), 0.0
            )
    tl.store(dpart_ptr + r * NC + c, tl.sum(acc, 0))


@triton.jit
def _decide_kernel(
    a_ptr,
    b_ptr,
    t_ptr,
    drafts_ptr,
    n_ptr,
    fpart_ptr,
    ipart_ptr,
    dpart_ptr,
    out_ptr,
    n_acc_ptr,
    token_ptr,
    div_ptr,
    V,
    P,
    sa0,
    sa1,
    sb0,
    sb1,
    st0,
    st1,
    K,
    out_stride,
    log_gamma,
    lam,
    NC,
    S_P2: tl.constexpr,
    NC_P2: tl.constexpr,
    HAS_N: tl.constexpr,
    GATE: tl.constexpr,
    BONUS_FUSED: tl.constexpr,
    HAS_DIV: tl.constexpr,
):
    i = tl.program_id(0)  # request: K + 1 rows and K draft slots, n of them real
    n = tl.load(n_ptr + i).to(tl.int32) if HAS_N else tl.full([], 0, tl.int32) + K
    d0 = i * K
    row0 = i * (K + 1)
    span = tl.full([], 0, tl.int32) + K + 1
    pos = tl.arange(0, S_P2)  # [S] positions of the request
    rows = row0 + pos
    in_span, is_draft = pos < span, pos < n
    cc = tl.arange(0, NC_P2)
    pmask = in_span[:, None] & (cc < NC)[None, :]
    parts = fpart_ptr + (rows[:, None] * NC + cc[None, :]) * 8  # [S, NC]
    lse_b = _lse_of_parts(
        tl.load(parts + 2, mask=pmask, other=float("-inf")),
        tl.load(parts + 3, mask=pmask, other=0.0),
        1,
    )
    lse_t = _lse_of_parts(
        tl.load(parts + 4, mask=pmask, other=float("-inf")),
        tl.load(parts + 5, mask=pmask, other=0.0),
        1,
    )
    if HAS_DIV or GATE == 0 or GATE == 3:
        D = tl.sum(
            tl.load(
                dpart_ptr + rows[:, None] * NC + cc[None, :], mask=pmask, other=0.0
            ),
            1,
        )
        if GATE == 3:
            D = tl.maximum(D, 0.0)  # KL(a || b)
        else:
            D = tl.minimum(
                tl.maximum(0.5 * D, 0.0), 0.6931471805599453
            )  # JSD in [0, ln 2]
        if HAS_DIV:
            tl.store(div_ptr + rows, D, mask=in_span)
    d = tl.load(drafts_ptr + d0 + pos, mask=is_draft, other=0).to(
        tl.int64
    )  # [S] draft tokens
    ok = is_draft & (d >= 0) & (d < V)
    rb, rp = (rows // P).to(tl.int64), (rows % P).to(tl.int64)
    lt_d = (
        tl.load(t_ptr + rb * st0 + rp * st1 + d, mask=ok, other=float("-inf")).to(
            tl.float32
        )
        - lse_t
    )
    lb_d = (
        tl.load(b_ptr + rb * sb0 + rp * sb1 + d, mask=ok, other=float("-inf")).to(
            tl.float32
        )
        - lse_b
    )
    if GATE == 1:  # fixed
        lg = log_gamma + tl.zeros([S_P2], tl.float32)
    elif GATE == 2:  # lambda: Delta = log p_a(d) - log p_b(d)
        lse_a = _lse_of_parts(
            tl.load(parts, mask=pmask, other=float("-inf")),
            tl.load(parts + 1, mask=pmask, other=0.0),
            1,
        )
        a_d = tl.load(a_ptr + rb * sa0 + rp * sa1 + d, mask=ok, other=float("-inf")).to(
            tl.float32
        )
        dl = (a_d - lse_a) - lb_d
        dl = tl.where(
            dl != dl, 0.0, tl.minimum(tl.maximum(dl, -FLT_MAX), FLT_MAX)
        )  # as torch.nan_to_num
        lg = log_gamma - lam * dl
    else:  # cda (JSD) or kl: log gamma_eff = log gamma - D
        lg = log_gamma - D
    accept = (lt_d > lg + lb_d) & is_draft  # Eq. 4 in log space; False past the drafts
    n_acc = tl.sum(
        (tl.cumsum(tl.where(accept, 0, 1), 0) == 0).to(tl.int32), 0
    )  # leading accepts
    best = ipart_ptr + ((row0 + n_acc) * NC + cc) * 2
    v = tl.load(
        fpart_ptr + ((row0 + n_acc) * NC + cc) * 8 + 6,
        mask=cc < NC,
        other=float("-inf"),
    )
    token = tl.min(
        tl.where(
            v == tl.max(v, 0), tl.load(best, mask=cc < NC, other=IDX_MAX), IDX_MAX
        ),
        0,
    )
    if not BONUS_FUSED:  # all drafts passed: argmax t at the bonus position
        v = tl.load(
            fpart_ptr + ((row0 + n_acc) * NC + cc) * 8 + 7,
            mask=cc < NC,
            other=float("-inf"),
        )
        t_tok = tl.min(
            tl.where(
                v == tl.max(v, 0),
                tl.load(best + 1, mask=cc < NC, other=IDX_MAX),
                IDX_MAX,
            ),
            0,
        )
        token = tl.where(n_acc == n, t_tok, token)
    tl.store(out_ptr + i * out_stride + pos, d.to(tl.int32), mask=pos < n_acc)
    tl.store(out_ptr + i * out_stride + n_acc, token)
    tl.store(n_acc_ptr + i, n_acc)
    tl.store(token_ptr + i, token)


def _interpreted(x: torch.Tensor) -> bool:
    return not x.is_cuda  # TRITON_INTERPRET=1 runs the kernels on CPU tensors


def plan_blocks(
    V: int,
    rows: int,
    device: torch.device,
    block: int | None = None,
    chunks: int | None = None,
) -> tuple[int, int, int, int]:
    """(BLOCK, chunk, NC, num_warps): each row splits into NC chunks of `chunk` columns (a multiple of
    BLOCK): at most 16 blocks each, and enough of them for 8 programs per SM (small batches); the
    interpreter prefers few, wide programs."""
    interp = device.type != "cuda"
    BLOCK = block or min(16384 if interp else 2048, triton.next_power_of_2(V))
    blocks = triton.cdiv(V, BLOCK)
    if chunks is None:
        sms = (
            1
            if interp
            else torch.cuda.get_device_properties(device).multi_processor_count
        )
        chunks = (
            1
            if interp
            else max(triton.cdiv(blocks, 16), triton.cdiv(8 * sms, max(rows, 1)))
        )
    chunk = triton.cdiv(blocks, max(1, min(chunks, blocks))) * BLOCK
    return BLOCK, chunk, triton.cdiv(V, chunk), 8 if BLOCK >= 2048 else 4


def _strides(x: torch.Tensor) -> tuple[int, int]:
    """(batch stride, position stride) of a [B, P, V] tensor."""
    return x.stride(0), x.stride(1)


def run_gate(
    a,
    b,
    t,
    drafts,
    num_drafts,
    cfg,
    banned,
    *,
    with_divergence: bool,
    block: int | None = None,
    chunks: int | None = None,
):
    """The kernels; under the interpreter numpy's warnings about -inf arithmetic (handled) are silenced, and a numpy
    the interpreter cannot run with is refused first (InterpreterNumpyError)."""
    if _interpreted(t):
        check_numpy()
    with (
        np.errstate(invalid="ignore", over="ignore", divide="ignore")
        if _interpreted(t)
        else nullcontext()
    ):
        return _launch(
            a, b, t, drafts, num_drafts, cfg, banned, with_divergence, block, chunks
        )


def _launch(a, b, t, drafts, counts, cfg, banned, with_divergence, block, chunks):
    """Launch the three kernels: a, b, t [B, K+1, V], drafts [B, K], counts num_drafts [B] or None.
    -> token_ids [B, K + 1] int32 (-1 past the committed), num_accepted [B] int32, token [B] int32 (the
       emitted one), divergence [B * (K+1)] float32 or None."""
    a, b, t = (x if x.stride(-1) == 1 else x.contiguous() for x in (a, b, t))
    drafts = drafts.contiguous()
    counts = counts.contiguous() if counts is not None else None
    dev, V = t.device, t.shape[-1]
    P, R = t.shape[-2], math.prod(t.shape[:-1])
    num_reqs, K = drafts.shape
    BLOCK, chunk, NC, warps = plan_blocks(V, R, dev, block, chunks)
    NC_P2 = triton.next_power_of_2(NC)
    fpart = torch.empty(R, NC, NF, dtype=torch.float32, device=dev)
    ipart = torch.empty(R, NC, 2, dtype=torch.int32, device=dev)
    strides = (*_strides(a), *_strides(b), *_strides(t))
    opts = (
        {} if _interpreted(t) else {"num_warps": warps, "enable_fp_fusion": False}
    )  # t + beta*delta as torch
    _stats_kernel[(R, NC)](
        a,
        b,
        t,
        banned if banned is not None else ipart,
        fpart,
        ipart,
        V,
        P,
        *strides,
        float(cfg.beta),
        chunk,
        NC,
        BLOCK=BLOCK,
        DELTA=DELTA_IDS[cfg.delta_source],
        BETA_ZERO=cfg.beta == 0,
        HAS_BANNED=banned is not None,
        T_ARGMAX=cfg.bonus != "fused",
        **opts,
    )
    has_div = with_divergence or cfg.gate in ("cda", "kl")
    dpart = torch.empty(R, NC, dtype=torch.float32, device=dev) if has_div else fpart
    if has_div:
        _divergence_kernel[(R, NC)](
            a,
            b,
            fpart,
            dpart,
            V,
            P,
            *strides[:4],
            chunk,
            NC,
            BLOCK=BLOCK,
            NC_P2=NC_P2,
            KL=cfg.gate == "kl",
            **opts,
        )
    token_ids = torch.full((num_reqs, K + 1), -1, dtype=torch.int32, device=dev)
    n_acc = torch.empty(num_reqs, dtype=torch.int32, device=dev)
    token = torch.empty(num_reqs, dtype=torch.int32, device=dev)
    div = torch.zeros(R, dtype=torch.float32, device=dev) if with_divergence else fpart
    n_arg = counts if counts is not None else n_acc
    _decide_kernel[(num_reqs,)](
        a,
        b,
        t,
        drafts,
        n_arg,
        fpart,
        ipart,
        dpart,
        token_ids,
        n_acc,
        token,
        div,
        V,
        P,
        *strides,
        K,
        K + 1,
        math.log(cfg.gamma),
        float(cfg.lam),
        NC,
        S_P2=triton.next_power_of_2(K + 1),
        NC_P2=NC_P2,
        HAS_N=counts is not None,
        GATE=GATE_IDS[cfg.gate],
        BONUS_FUSED=cfg.bonus == "fused",
        HAS_DIV=with_divergence,
        **opts,
    )
    return token_ids, n_acc, token, (div if with_divergence else None)
