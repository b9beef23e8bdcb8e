"""The sampled rules of every method across a vocabulary map (temperature > 0 on a cross-family pair).

They are sampling.py's rules applied to each distribution restricted to the shared set, the way vocab_align.py
applies gate.py's greedy rules. Every draw runs over the S shared tokens in increasing DRAFTER id order: the
seeded draws (exponential races, uniforms) walk their columns in order, so an order that depends on the
drafter's ids alone makes a verifier whose ids are permuted (same strings, other ids) draw exactly the same
tokens, which is what keeps the permuted-verifier oracle exact under sampling. With x|S a distribution's
scores at the shared tokens (its other tokens excluded before filtering):
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
Banned tokens (structural, min_tokens' held stop tokens) are given in verifier ids [Vv] and excluded in S.
Drafts and tokens in and out are verifier ids, as in vocab_align.py.
"""

from __future__ import annotations

import torch

from . import sampling, vocab_align
from .config import AsymSpecConfig
from .errors import ConfigError
from .gate import StepOutcome, select
from .methods import DRAFTED
from .vocab_align import VocabMap


def _shared(vmap: VocabMap, banned: torch.Tensor | None, device):
    """(drafter ids [S], verifier ids [S], position of each verifier id [Vv], banned [S] or None), S in
    drafter-id order."""
    d, v, pos = vmap.in_drafter_order(device)
    return d, v, pos, None if banned is None else banned.to(device)[v]


def pick(
    logits_d: torch.Tensor,
    cfg: AsymSpecConfig,
    banned: torch.Tensor | None,
    vmap: VocabMap,
    gens: list[torch.Generator],
) -> torch.Tensor:
    """One draft per row drawn from filtered(drafter logits|S). logits_d [B, Vd] -> verifier ids [B]."""
    d, v, _, banned_s = _shared(vmap, banned, logits_d.device)
    lp = sampling.filtered_logprobs(logits_d[..., d], cfg, banned_s)  # [B, S]
    return v[sampling.draw(lp, gens)]


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
    set). The emitted token is a verifier id in the shared set."""
    t = logits.get("t")
    device = (t if t is not None else logits["q"]).device
    d, v, pos, banned_s = _shared(vmap, banned, device)
    drafts_s = pos[drafts]  # [B, K] positions in S
    K = drafts.shape[1]

    def drafted_by(x_d: torch.Tensor | None) -> torch.Tensor | None:
        """log filtered(x|S) of the distribution the drafts were drawn from, [B, K(+1), S]."""
        if x_d is None or K == 0:
            return None
        return sampling.filtered_logprobs(x_d[..., d], cfg, banned_s)

    if name == "asymspec":
        return _asymspec(
            logits["a"], logits["b"], t, drafts, cfg, vmap, gens, v, banned_s
        )
    if name in ("sd", "floor"):
        out = sampling.speculative_sampling(
            t[..., v], drafted_by(logits.get("sd")), drafts_s, cfg, gens, banned_s
        )
    elif name == "scd":
        b = logits["b"]
        target = vocab_align.contrastive_scores(b, t, cfg, vmap)[..., v]
        q = logits.get(DRAFTED)
        out = sampling.speculative_sampling(
            target, drafted_by(b if q is None else q), drafts_s, cfg, gens, banned_s
        )
    elif name == "drafter":
        out = sampling.speculative_sampling(
            logits["q"][..., d], None, drafts_s, cfg, gens, banned_s
        )
    else:
        raise ConfigError(
            f"method {name!r} has no sampled rule across a vocabulary map"
        )
    return StepOutcome(out.num_accepted, v[out.token], out.is_bonus)


def _asymspec(a, b, t, drafts, cfg, vmap, gens, v, banned_s) -> StepOutcome:
    """AsymSpec sampled across the map: a [B, K or K+1, Vd] (b_{K+1} stands in for a_{K+1}, as in
    sampling.sample_asymspec), b [B, K+1, Vd], t [B, K+1, Vv]."""
    if a.shape[1] == drafts.shape[1]:
        a = torch.cat([a, b[:, -1:]], dim=1)
    a, b, t = a.float(), b.float(), t.float()
    n_acc, is_bonus, divergence = vocab_align.aligned_gate(a, b, t, drafts, cfg, vmap)
    t_p, a_p, b_p = select(t, n_acc), select(a, n_acc), select(b, n_acc)
    fused = vocab_align.fused_scores(a_p, b_p, t_p, cfg, vmap)[..., v]  # [B, S]
    bonus = fused if cfg.bonus == "fused" else t_p[..., v]
    scores = torch.where(is_bonus[:, None], bonus, fused)
    token = sampling.draw(sampling.filtered_logprobs(scores, cfg, banned_s), gens)
    return StepOutcome(n_acc, v[token], is_bonus, divergence)
