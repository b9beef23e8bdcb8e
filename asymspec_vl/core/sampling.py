"""Sampled decoding (temperature > 0): vLLM's filtered distribution, seeded draws, and the sampled rule of every
method, shared by both backends (the transformers loop and the vLLM sampler call exactly these).

  filtered(x)  the distribution vLLM's sampler draws from: x / tau, then min_p (probabilities below
               min_p * max), top_k (logits below the k-th largest), top_p (the smallest tail whose mass is at
               most 1 - p, the largest token always kept), each -> -inf; banned tokens -inf first.
  Floor, drafter alone   the token ~ filtered(t) (filtered(q)): no drafts.
  SD, SCD      lossless speculative sampling (Leviathan et al. 2023; vLLM's rejection sampler): drafts
               d_i ~ q = filtered(drafter logits); accept d_i with probability min(1, p(d_i) / q(d_i)); at the
               first rejection emit a token ~ norm(max(0, p - q)); after n accepts the bonus ~ p at n + 1.
               p = filtered(t) (SD: the emitted tokens are distributed as the verifier's p exactly) or
               filtered(SCD's contrastive target).
  AsymSpec     our extension of Algorithm 1 (the paper is greedy): drafts d_i ~ filtered(a_i); the gate is
               Algorithm 1's, unchanged (accept d_i iff p_t(d_i) > gamma_eff * p_b(d_i), probabilities at
               temperature 1, D = JSD(a || b)); at the first rejection the emitted token ~ filtered(t + beta *
               delta); the bonus ~ filtered(t) (filtered(t + beta * delta) with bonus="fused"). tau -> 0 gives
               Algorithm 1 exactly (filtered(x) tends to the one-hot of argmax x).
Randomness: one torch.Generator per row, seeded with cfg.seed (vLLM's per-request generators); draws are
exponential races (vLLM's random_sample: argmax p / E, E ~ Exp(1)) and uniforms, row by row.
"""

from __future__ import annotations

import torch

from .config import AsymSpecConfig
from .gate import StepOutcome, context_delta, fuse, gate_accepts, scd_scores, select


def filtered_logprobs(
    logits: torch.Tensor, cfg: AsymSpecConfig, banned: torch.Tensor | None = None
) -> torch.Tensor:
    """log filtered(logits) at cfg.temperature (> 0), in vLLM's order. [..., V] -> [..., V] float32."""
    x = logits.float()
    if banned is not None:
        x = x.masked_fill(banned, float("-inf"))
    x = x / cfg.temperature
    if cfg.min_p > 0.0:
        p = x.softmax(-1)
        x = x.masked_fill(p < p.amax(-1, keepdim=True) * cfg.min_p, float("-inf"))
    if 0 < cfg.top_k < x.shape[-1]:
        kth = x.topk(cfg.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if cfg.top_p < 1.0:
        x_sort, idx = x.sort(dim=-1)  # ascending
        tail = x_sort.softmax(-1).cumsum(-1) <= 1.0 - cfg.top_p
        tail[..., -1] = False  # at least one token
        x = x.scatter(-1, idx, x_sort.masked_fill(tail, float("-inf")))
    return x.log_softmax(-1)


def generators(cfg: AsymSpecConfig, rows: int, device) -> list[torch.Generator]:
    """One generator per row, each seeded with cfg.seed (None: a fresh random seed per row)."""
    out = []
    for _ in range(rows):
        g = torch.Generator(device=device)
        if cfg.seed is None:
            g.seed()
        else:
            g.manual_seed(cfg.seed % 2**64)
        out.append(g)
    return out


def draw(logprobs: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
    """One token per row from exp(logprobs) [B, V] by an exponential race (vLLM's random_sample). -> [B]."""
    e = torch.empty_like(logprobs)
    for i, g in enumerate(gens):
        e[i].exponential_(generator=g)
    return (logprobs.exp() / e).argmax(-1)


def uniforms(n: int, gens: list[torch.Generator], device) -> torch.Tensor:
    """n uniforms in [0, 1) per row. -> [B, n] float32."""
    return (
        torch.stack([torch.rand(n, generator=g, device=device) for g in gens])
        if gens
        else torch.zeros(0, n, device=device)
    )


def speculative_sampling(
    target: torch.Tensor,
    draft_logprobs: torch.Tensor | None,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    gens: list[torch.Generator],
    banned: torch.Tensor | None = None,
) -> StepOutcome:
    """Lossless speculative sampling against target scores [B, K+1, V]; draft_logprobs [B, K(+1), V] are the
    log filtered distributions the drafts [B, K] were drawn from (None when K = 0)."""
    lp = filtered_logprobs(target, cfg, banned)  # [B, K+1, V]
    B, K = drafts.shape
    n_acc = torch.zeros(B, dtype=torch.long, device=lp.device)
    if K:
        idx = drafts.unsqueeze(-1)
        log_p = lp[:, :K].gather(-1, idx).squeeze(-1)  # [B, K]
        log_q = draft_logprobs[:, :K].float().gather(-1, idx).squeeze(-1)
        u = uniforms(K, gens, lp.device)
        accept = (log_q > float("-inf")) & (
            u < (log_p - log_q).exp()
        )  # u < min(1, p / q)
        n_acc = accept.long().cumprod(1).sum(1)
    is_bonus = n_acc == K
    p = select(lp, n_acc).exp()  # [B, V]
    if K:
        q = select(
            torch.cat([draft_logprobs[:, :K].float(), lp[:, -1:]], 1), n_acc
        ).exp()
        residual = torch.where(is_bonus[:, None], p, (p - q).clamp_min(0.0))
        empty = (
            residual.sum(-1, keepdim=True) <= 0
        )  # p == q: rejection cannot happen; p keeps it defined
        p = torch.where(
            empty, p, residual / residual.sum(-1, keepdim=True).clamp_min(1e-30)
        )
    token = draw(p.clamp_min(1e-38).log().masked_fill(p <= 0, float("-inf")), gens)
    return StepOutcome(n_acc, token, is_bonus)


def sample_asymspec(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    gens: list[torch.Generator],
    banned: torch.Tensor | None = None,
) -> StepOutcome:
    """AsymSpec at temperature > 0 (our extension, module docstring): Algorithm 1's gate on the drafts drawn
    from filtered(a); the emitted token drawn from filtered(t + beta * delta) at the first rejection, from
    filtered(t) for the bonus. a: [B, K or K+1, V] (as gate.decide_asymspec); b, t: [B, K+1, V]."""
    if a.shape[1] == drafts.shape[1]:
        a = torch.cat([a, b[:, -1:]], dim=1)
    a, b, t = a.float(), b.float(), t.float()
    n_acc, is_bonus, divergence = gate_accepts(a, b, t, drafts, cfg)
    t_p, a_p, b_p = select(t, n_acc), select(a, n_acc), select(b, n_acc)  # [B, V]
    fused = fuse(t_p, context_delta(a_p, b_p, t_p, cfg.delta_source), cfg.beta)
    bonus = fused if cfg.bonus == "fused" else t_p
    scores = torch.where(is_bonus[:, None], bonus, fused)
    token = draw(filtered_logprobs(scores, cfg, banned), gens)
    return StepOutcome(n_acc, token, is_bonus, divergence)


def sample_scd(
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    gens: list[torch.Generator],
    banned: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
) -> StepOutcome:
    """SCD at temperature > 0: speculative sampling against its contrastive target (from b, t [B, K+1, V]), the
    drafts drawn from filtered(q); q [B, K, V] the drafting pass's logits where they are not b's (the vLLM
    sampler's: b comes from its x_comp scoring pass there), b itself by default."""
    return speculative_sampling(
        scd_scores(t, b, cfg.beta, cfg.scd_alpha),
        filtered_logprobs(b if q is None else q, cfg, banned),
        drafts,
        cfg,
        gens,
        banned,
    )


def sample_sd(
    t: torch.Tensor,
    q: torch.Tensor | None,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    gens: list[torch.Generator],
    banned: torch.Tensor | None = None,
) -> StepOutcome:
    """SD at temperature > 0 (and, with no drafts, Floor and the drafter alone): speculative sampling against
    the verifier's t [B, K+1, V]; q [B, K(+1), V] the drafter's logits the drafts were drawn from."""
    return speculative_sampling(
        t,
        filtered_logprobs(q, cfg, banned) if q is not None else None,
        drafts,
        cfg,
        gens,
        banned,
    )
