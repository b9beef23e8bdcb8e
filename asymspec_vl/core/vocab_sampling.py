"""The sampled rules of every method across a vocabulary map (temperature > 0 on a cross-family pair).

They are sampling.py's rules applied to each distribution restricted to the shared set, the way vocab_align.py
applies gate.py's greedy rules. Every draw runs over the drafter's FULL vocabulary in drafter-id order, the
tokens outside the shared set (and the banned ones) at probability 0: column j of a draw is drafter id j, a
verifier-space distribution x is read there at x[v(j)] (VocabMap.to_drafter_space). Why: a seeded draw (an
exponential race over its columns, vLLM's random_sample) is a function of its columns' order and count, so
  - an order fixed by the drafter alone makes a verifier whose ids are permuted (same strings, other ids) draw
    exactly the same tokens: the permuted-verifier oracle holds under sampling;
  - the drafter alone's draw is vLLM's own sampler's on a plain drafter engine that bans the same ids with
    logit_bias (the same [B, Vd] columns, the same generator stream), so that engine samples it;
  - a full map in one order (every id paired with itself) is sampling.py's draws exactly.
With x|S a distribution's scores at the shared tokens (its other tokens excluded before filtering):
  drafts       d_i ~ filtered(drafting logits|S): a_i for AsymSpec, SD's drafter for SD, b_i for SCD;
  Floor        token ~ filtered(t|S); the drafter alone: token ~ filtered(q|S);
  SD           lossless speculative sampling against filtered(t|S) with the drafts' filtered(q|S): the
               token-level-intersection rule. Its tokens are distributed exactly as the Floor's, i.e. as the
               verifier restricted to the shared set (lossless with respect to that; not with respect to an
               unrestricted verifier that puts mass outside the shared set);
  SCD          speculative sampling against vocab_align.contrastive_scores|S;
  AsymSpec     the gate is vocab_align.aligned_gate, unchanged (each model's own full softmax, as greedy and as
               sampling.sample_asymspec keeps Algorithm 1's gate); at the first rejection the token ~
               filtered(fused|S) (t + beta * delta, delta moved through the map), the bonus ~ filtered(t|S)
               (filtered(fused|S) with bonus="fused").
t is read with the verifier's end aliases folded into its answer end (VocabMap.fold_ends, once per step).
Banned tokens (structural, min_tokens' held stop tokens) are given in verifier ids [Vv] and excluded with the
unshared ones (VocabMap.drafter_banned). Drafts and tokens in and out are verifier ids, as in vocab_align.py.
"""

from __future__ import annotations

import torch

from . import sampling, vocab_align
from .config import AsymSpecConfig
from .errors import ConfigError
from .gate import StepOutcome, select
from .methods import DRAFTED
from .vocab_align import VocabMap


def pick(
    logits_d: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None,
    vmap: VocabMap,
    gens: list[torch.Generator],
) -> torch.Tensor:
    """One draft per row drawn from filtered(drafter logits|S). logits_d [B, Vd] -> verifier ids [B]."""
    out = vmap.drafter_banned(banned, logits_d.device)  # [Vd] unshared or banned
    lp = sampling.filtered_logprobs(logits_d, cfg, out)  # [B, Vd]
    return vmap.to(logits_d.device).d2v[sampling.draw(lp, gens)]


def sample(
    name: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    drafts: torch.Tensor,
    banned: torch.Tensor | None,
    vmap: VocabMap,
    gens: list[torch.Generator],
) -> StepOutcome:
    """The sampled rule of method `name` across the map (logits by name as in methods.py: a, b, q, sd and DRAFTED
    in drafter space [B, n, Vd], t in verifier space [B, K+1, Vv]; drafts [B, K] verifier ids in the shared
    set). The emitted token is a verifier id in the shared set; t is read with the verifier's end aliases folded
    into its answer end (VocabMap.fold_ends, as vocab_align.decide reads it)."""
    t = logits.get("t")
    t = vmap.fold_ends(t) if t is not None else None
    device = (t if t is not None else logits["q"]).device
    _, _, d2v, v2d = vmap.to(device)
    out = vmap.drafter_banned(banned, device)  # [Vd] columns never drawn
    drafts_d = v2d[drafts]  # [B, K] the drafts' columns (drafter ids)
    K = drafts.shape[1]

    def drafted_by(x_d: torch.Tensor | None) -> torch.Tensor | None:
        """log filtered(x|S) of the distribution the drafts were drawn from, [B, K(+1), Vd]."""
        if x_d is None or K == 0:
            return None
        return sampling.filtered_logprobs(x_d, cfg, out)

    if name == "asymspec":
        return _asymspec(logits["a"], logits["b"], t, drafts, cfg, vmap, gens, out)
    if name in ("sd", "floor"):
        target = vmap.to_drafter_space(t.float())  # [B, K+1, Vd]
        step = sampling.speculative_sampling(
            target, drafted_by(logits.get("sd")), drafts_d, cfg, gens, out
        )
    elif name == "scd":
        b = logits["b"]
        target = vmap.to_drafter_space(vocab_align.contrastive_scores(b, t, cfg, vmap))
        q = logits.get(DRAFTED)
        step = sampling.speculative_sampling(
            target, drafted_by(b if q is None else q), drafts_d, cfg, gens, out
        )
        step.token = _kept(step.token, out)
    elif name == "drafter":
        step = sampling.speculative_sampling(
            logits["q"], None, drafts_d, cfg, gens, out
        )
    else:
        raise ConfigError(
            f"method {name!r} has no sampled rule across a vocabulary map"
        )
    return StepOutcome(step.num_accepted, d2v[step.token], step.is_bonus)


def _asymspec(a, b, t, drafts, cfg, vmap, gens, out) -> StepOutcome:
    """AsymSpec sampled across the map: a [B, K or K+1, Vd] (b_{K+1} stands in for a_{K+1}, as in
    sampling.sample_asymspec), b [B, K+1, Vd], t [B, K+1, Vv]; out [Vd] the columns never drawn."""
    if a.shape[1] == drafts.shape[1]:
        a = torch.cat([a, b[:, -1:]], dim=1)
    a, b, t = a.float(), b.float(), t.float()
    n_acc, is_bonus, divergence = vocab_align.aligned_gate(a, b, t, drafts, cfg, vmap)
    t_p, a_p, b_p = select(t, n_acc), select(a, n_acc), select(b, n_acc)
    fused = vocab_align.fused_scores(a_p, b_p, t_p, cfg, vmap)  # [B, Vv]
    bonus = fused if cfg.bonus == "fused" else t_p
    scores = vmap.to_drafter_space(
        torch.where(is_bonus[:, None], bonus, fused)
    )  # [B, Vd]
    token = sampling.draw(sampling.filtered_logprobs(scores, cfg, out), gens)
    return StepOutcome(n_acc, vmap.to(t.device).d2v[token], is_bonus, divergence)


def _kept(columns: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """SCD's drawn columns [B] (drafter ids), each an allowed one. Its plausibility cut counts banned tokens and may
    leave only those: that row's target is all -inf over the allowed columns, its draw NaN, and the exponential
    race's argmax falls to column 0; such a row takes the lowest allowed drafter id. (Every other method's
    distribution keeps a finite score at every allowed column: t, q and t + beta * delta are finite.)"""
    first = (~out).nonzero()[0]  # [1]
    return torch.where(out[columns], first, columns)
