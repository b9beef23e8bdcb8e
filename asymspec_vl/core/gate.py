"""The per-step math of AsymSpec (Algorithm 1, lines 8-24) and of the greedy baselines, on batched logits.

Terms, for one speculation step of one request with K drafts d_1..d_K:
  a_i  drafter logits on x_full     b_i  drafter logits on x_comp     t_i  verifier logits on x_comp
  i = 1..K+1; position K+1 follows the last draft.  All tensors are [B, K+1, V].
  delta_i   = a_i - b_i                                  (context gain, Eq. 1; other sources selectable)
  D_i       = JSD(softmax a_i || softmax b_i)            (natural log, so 0 <= D_i <= ln 2)
  gamma_eff = gamma * exp(-D_i)                          (CDA gate, Eq. 3)
  accepted  : p_t(d_i) > gamma_eff * p_b(d_i)            (Eq. 4, compared in log space)
  fused     : argmax(t_i + beta * delta_i) at the first rejection (Eq. 2)
  bonus     : argmax(t_{K+1}) when all drafts pass (or the fused variant)
Every argmax skips `banned` tokens (structural specials such as <|image_pad|>) and breaks ties
toward the lowest token id. Logits of any float dtype are reduced in float32.
Both backends (transformers loop, vLLM sampler) and the kernels call exactly these definitions; the sampled
rules (temperature > 0) are in sampling.py, on the same gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .config import AsymSpecConfig

LN2 = math.log(2.0)


@dataclass
class StepOutcome:
    """What one speculation step commits, per request."""

    num_accepted: torch.Tensor  # [B] int64: leading drafts accepted (0..num_drafts)
    token: (
        torch.Tensor
    )  # [B] int64: the token emitted after them (fused at a rejection, else bonus)
    is_bonus: torch.Tensor  # [B] bool: True when every draft passed
    divergence: torch.Tensor | None = (
        None  # [B, K+1] float32: D_i of the gate (None for SD/SCD)
    )

    def committed(self, drafts: torch.Tensor | list[list[int]]) -> list[list[int]]:
        """Per request: the accepted drafts followed by the emitted token. drafts [B, n]: a tensor, or the host
        lists it was made from (then the outcome is the one read from the device: one sync, not three)."""
        n, tok = torch.stack(
            [self.num_accepted, self.token.to(self.num_accepted.dtype)]
        ).tolist()
        d = drafts.tolist() if isinstance(drafts, torch.Tensor) else drafts
        return [row[:k] + [x] for row, k, x in zip(d, n, tok)]


def greedy(logits: torch.Tensor, banned: torch.Tensor | None = None) -> torch.Tensor:
    """argmax over the vocabulary, never a banned token. [..., V] -> [...] int64."""
    if banned is not None:
        logits = logits.masked_fill(banned, float("-inf"))
    return logits.argmax(dim=-1)


def jsd(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats from log-probabilities. [..., V] -> [...], in [0, ln 2]."""
    log_m = torch.logaddexp(log_p, log_q) - LN2
    p, q = log_p.exp(), log_q.exp()
    kl_pm = torch.where(p > 0, p * (log_p - log_m), 0.0).sum(-1)
    kl_qm = torch.where(q > 0, q * (log_q - log_m), 0.0).sum(-1)
    return (0.5 * (kl_pm + kl_qm)).clamp(0.0, LN2)  # clamp only absorbs float round-off


def kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) in nats from log-probabilities; +inf where q = 0 < p. [..., V] -> [...]."""
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_q), 0.0).sum(-1).clamp_min(0.0)


def context_delta(
    a: torch.Tensor, b: torch.Tensor, t: torch.Tensor, source: str
) -> torch.Tensor:
    """delta by source: "contrastive" a - b (Eq. 1), "raw" a, "scd" t - b. Float32, NaN (-inf - -inf) -> 0."""
    if source == "contrastive":
        delta = a - b
    elif source == "raw":
        delta = a
    elif source == "scd":
        delta = t - b
    else:
        raise ValueError(f"unknown delta source {source!r}")
    return torch.nan_to_num(delta, nan=0.0, posinf=float("inf"), neginf=float("-inf"))


def fuse(t: torch.Tensor, delta: torch.Tensor, beta: float) -> torch.Tensor:
    """Fused scores t + beta * delta (Eq. 2); beta = 0 gives t exactly; undefined sums (inf - inf) -> -inf."""
    if beta == 0.0:
        return t
    return torch.nan_to_num(
        t + beta * delta, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf")
    )


def log_gamma_eff(
    cfg: AsymSpecConfig,
    la: torch.Tensor,
    lb: torch.Tensor,
    drafts: torch.Tensor,
    divergence: torch.Tensor,
) -> torch.Tensor:
    """log gamma_eff at the K draft positions. la, lb: [B, K+1, V] log-probs; drafts [B, K] -> [B, K]."""
    K = drafts.shape[1]
    log_gamma = torch.full(
        drafts.shape, math.log(cfg.gamma), dtype=torch.float32, device=la.device
    )
    if cfg.gate == "fixed":
        return log_gamma
    if cfg.gate in ("cda", "kl"):
        return log_gamma - divergence[:, :K]
    # "lambda": Delta = log p_a(d) - log p_b(d) at the draft token
    idx = drafts.unsqueeze(-1)
    d_logp = la[:, :K].gather(-1, idx).squeeze(-1) - lb[:, :K].gather(-1, idx).squeeze(
        -1
    )
    return log_gamma - cfg.lam * torch.nan_to_num(d_logp, nan=0.0)


def leading_accepts(
    accept: torch.Tensor, num_drafts: torch.Tensor | None
) -> torch.Tensor:
    """Number of leading True per row, counting only the first num_drafts positions. [B, K] -> [B]."""
    if num_drafts is not None:
        pos = torch.arange(accept.shape[1], device=accept.device)
        accept = accept & (pos < num_drafts.unsqueeze(1))
    return accept.long().cumprod(dim=1).sum(dim=1)


def select(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x[b, pos[b]] for x [B, K+1, V] -> [B, V]."""
    return x[torch.arange(x.shape[0], device=x.device), pos]


def gate_accepts(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    num_drafts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CDA gate (Algorithm 1, lines 8-12) on float32 logits a, b, t [B, K+1, V] and drafts [B, K]:
    (leading drafts accepted [B], every draft passed [B], D_i [B, K+1]). Probabilities at temperature 1."""
    K = drafts.shape[1]
    la, lb, lt = a.log_softmax(-1), b.log_softmax(-1), t.log_softmax(-1)
    divergence = kl(la, lb) if cfg.gate == "kl" else jsd(la, lb)  # [B, K+1]
    idx = drafts.unsqueeze(-1)
    lt_d = lt[:, :K].gather(-1, idx).squeeze(-1)  # [B, K] log p_t(d_i)
    lb_d = lb[:, :K].gather(-1, idx).squeeze(-1)  # [B, K] log p_b(d_i)
    accept = lt_d > log_gamma_eff(cfg, la, lb, drafts, divergence) + lb_d
    n_acc = leading_accepts(accept, num_drafts)
    n_drafts = num_drafts if num_drafts is not None else torch.full_like(n_acc, K)
    return n_acc, n_acc == n_drafts, divergence


def asymspec_step(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None = None,
    num_drafts: torch.Tensor | None = None,
) -> StepOutcome:
    """Gate the drafts and choose the emitted token (Algorithm 1, lines 8-24).

    a, b, t: [B, K+1, V] logits; drafts: [B, K] int64; banned: [V] bool;
    num_drafts: [B] drafts per request when fewer than K (positions past it are padding).
    """
    a, b, t = a.float(), b.float(), t.float()
    n_acc, is_bonus, divergence = gate_accepts(a, b, t, drafts, cfg, num_drafts)
    t_p, a_p, b_p = select(t, n_acc), select(a, n_acc), select(b, n_acc)  # [B, V] each
    fused = greedy(
        fuse(t_p, context_delta(a_p, b_p, t_p, cfg.delta_source), cfg.beta), banned
    )
    bonus = fused if cfg.bonus == "fused" else greedy(t_p, banned)
    token = torch.where(is_bonus, bonus, fused)
    return StepOutcome(n_acc, token, is_bonus, divergence)


def greedy_verify(
    scores: torch.Tensor,
    drafts: torch.Tensor,
    banned: torch.Tensor | None = None,
    num_drafts: torch.Tensor | None = None,
) -> StepOutcome:
    """Greedy speculative verification against target scores [B, K+1, V]: accept d_i iff it is the
    target's argmax; emit the target's argmax at the first mismatch (or the bonus position).
    Lossless: the committed tokens equal greedy decoding of the target scores."""
    target = greedy(scores.float(), banned)  # [B, K+1]
    K = drafts.shape[1]
    n_acc = leading_accepts(drafts == target[:, :K], num_drafts)
    n_drafts = num_drafts if num_drafts is not None else torch.full_like(n_acc, K)
    token = target.gather(1, n_acc.unsqueeze(1)).squeeze(1)
    return StepOutcome(n_acc, token, n_acc == n_drafts)


def scd_scores(
    t: torch.Tensor, b: torch.Tensor, beta: float, alpha: float
) -> torch.Tensor:
    """Speculative contrastive decoding target (Yuan et al. 2023, as in the paper's Appendix B):
    (1 + beta) * log p_t - beta * log p_b on the plausible set {log p_t >= log alpha + max log p_t},
    -inf elsewhere. t is the expert (verifier), b the amateur (drafter), both on x_comp. [.., V] -> [.., V]."""
    lt, lb = t.float().log_softmax(-1), b.float().log_softmax(-1)
    plausible = lt >= math.log(alpha) + lt.max(dim=-1, keepdim=True).values
    score = torch.nan_to_num(
        (1.0 + beta) * lt - beta * lb, nan=float("-inf"), posinf=float("inf")
    )
    return score.masked_fill(~plausible, float("-inf"))


# -- the decision rules, by method (methods.py says which method uses which) --------------------------
def decide_sd(
    t: torch.Tensor, drafts: torch.Tensor, banned: torch.Tensor | None = None
) -> StepOutcome:
    """Symmetric speculative decoding (and, with no drafts, plain greedy decoding): greedy verification of
    the drafts against the verifier's logits t [B, K+1, V]."""
    return greedy_verify(t, drafts, banned)


def decide_scd(
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None = None,
) -> StepOutcome:
    """Speculative contrastive decoding (Appendix B): greedy verification against the contrastive target
    of the verifier t and the drafter b on x_comp, both [B, K+1, V]."""
    return greedy_verify(scd_scores(t, b, cfg.beta, cfg.scd_alpha), drafts, banned)
