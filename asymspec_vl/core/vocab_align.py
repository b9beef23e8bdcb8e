"""The greedy rules of every method across a vocabulary map (a cross-family pair, the paper's Appendix D).

A cross-family pair has two vocabularies: the drafter's (Vd ids) and the verifier's (Vv ids). The map
(VocabMap) pairs S of them one-to-one: the tokens whose decoded byte strings are identical, the two answer ends
(the special token each chat template closes the assistant's turn with), and the specials paired by name or
role (turn start, pad; inputs/vocab_map.py builds it). The shared set is ordered by verifier id, so "argmax over
the shared set, ties to the lowest id" is the same tie rule as gate.greedy's. Only ids below each model's logit
rows enter it (a typed error otherwise). The verifier's other EOS ids (its end aliases) are off the shared set:
every rule reads t through VocabMap.fold_ends, which moves their probability into the answer end's column
(decide, vocab_sampling.sample and shared_scores call it once, so both backends read the same t).

The rules (Timor et al. 2025; the paper's Appendix D), with d_i a draft, a_i / b_i drafter logits [.., Vd],
t_i verifier logits [.., Vv], and v(.) / r(.) the map drafter id -> verifier id / back:
  drafts    the drafter picks d_i among the shared set only (its other tokens masked before the pick);
  t         is read at the mapped ids: the verifier's view of draft d_i is t_i[v(d_i)];
  gate      p_t(v(d_i)) > gamma_eff * p_b(d_i), each probability its own model's softmax over its OWN FULL
            vocabulary, and D_i = JSD(softmax a_i || softmax b_i) over the drafter's full vocabulary.
            Why not renormalise over the shared set: the gate asks "does the verifier find this token as
            likely as the drafter does", and each model's own softmax is the probability it actually assigns;
            renormalising would inflate both by their (different) unshared mass and let a verifier whose mass
            sits outside the shared set accept drafts it finds unlikely. With the full softmax a same-family
            pair (identity map) gives exactly gate.py's numbers.
  delta     delta_i = a_i - b_i lives in drafter space and is moved to verifier space through the map
            (delta_v[v(j)] = delta[j] for shared j; unshared verifier ids get no delta and are never emitted);
  fused     argmax over the shared set of t_i + beta * delta_v,i; the bonus argmax over the shared set of t;
  commit    the committed token is given to each model in its own ids (the loop keeps y in verifier ids; the
            drafter's sources read r(y)).
Floor and SD are defined on the same shared set: Floor is the verifier's greedy token over the shared set,
SD accepts d_i iff v(d_i) is that token (token-level intersection, greedy). SD stays lossless with respect to
the verifier restricted to the shared set (its tokens equal Floor's, exactly); it is not lossless with
respect to the unrestricted verifier whenever that verifier's argmax lies outside the shared set. SCD and
drafter-alone likewise score only shared tokens (SCD's amateur log p_b is the drafter's full-vocabulary
log-softmax, moved through the map; its plausibility cut is relative to the best shared token).
Every tensor here is float32 for the math; drafts and tokens are int64 in verifier ids unless named _d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import gate
from .config import AsymSpecConfig
from .errors import ConfigError, VocabularyMismatchError


class MapTables(NamedTuple):
    """A map's index tensors on one device."""

    drafter_ids: torch.Tensor  # [S] the shared set's drafter ids
    verifier_ids: torch.Tensor  # [S] their verifier ids, increasing
    d2v: torch.Tensor  # [Vd] verifier id of each drafter id, -1 off the shared set
    v2d: torch.Tensor  # [Vv] drafter id of each verifier id, -1 off the shared set


@dataclass
class VocabMap:
    """The shared set of a pair: drafter_ids[s] and verifier_ids[s] name the same token (s = 0..S-1, ordered
    by verifier id). identity: both vocabularies are one (same family): callers keep the unmapped path."""

    drafter_ids: torch.Tensor  # [S] int64
    verifier_ids: torch.Tensor  # [S] int64, strictly increasing
    drafter_size: int  # Vd
    verifier_size: int  # Vv
    identity: bool = False
    specials: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # role -> (drafter id, verifier id); "answer_end": the two chat templates' assistant-turn ends
    # the verifier's other EOS ids (off the shared set): their logits fold into the answer end's (fold_ends)
    end_aliases: tuple[int, ...] = ()
    notes: tuple[
        str, ...
    ] = ()  # what inputs/vocab_map.describe prints beside the numbers
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        for who, ids, size in (
            ("drafter", self.drafter_ids, self.drafter_size),
            ("verifier", self.verifier_ids, self.verifier_size),
        ):
            past = ids[(ids < 0) | (ids >= size)]
            if past.numel():
                raise VocabularyMismatchError(
                    f"the vocabulary map holds {who} ids {sorted(set(past.tolist()))[:8]} the {who} has no "
                    f"logit row for (it has {size}, ids 0..{size - 1}): ids past a model's rows never enter a map"
                )
        if self.end_aliases:
            end = self.specials.get("answer_end")
            shared = set(self.verifier_ids.tolist())
            wrong = [
                j
                for j in self.end_aliases
                if not 0 <= j < self.verifier_size or j in shared
            ]
            if end is None or wrong:
                raise VocabularyMismatchError(
                    f"the verifier's end aliases {list(self.end_aliases)} need an answer end (has "
                    f"{end}) and must be ids with a logit row outside the shared set ({wrong} are not)"
                )

    @classmethod
    def same_vocabulary(cls, size: int) -> VocabMap:
        ids = torch.arange(size)
        return cls(ids, ids.clone(), size, size, identity=True)

    @property
    def size(self) -> int:
        return int(self.verifier_ids.numel())

    def share(self) -> tuple[float, float]:
        """(share of the drafter's vocabulary, share of the verifier's) the shared set covers."""
        return self.size / self.drafter_size, self.size / self.verifier_size

    def to(self, device) -> MapTables:
        """This map's index tensors on `device` (cached: moved once per device)."""
        key = str(device)
        if key not in self._cache:
            d, v = self.drafter_ids.to(device), self.verifier_ids.to(device)
            d2v = torch.full((self.drafter_size,), -1, dtype=torch.long, device=device)
            v2d = torch.full((self.verifier_size,), -1, dtype=torch.long, device=device)
            d2v[d], v2d[v] = v, d
            self._cache[key] = MapTables(d, v, d2v, v2d)
        return self._cache[key]

    def fold_ends(self, t: torch.Tensor) -> torch.Tensor:
        """The verifier's logits t [.., Vv] with its end aliases folded into its answer end: that column becomes
        logsumexp(t[answer end], t[aliases]) and the aliases -inf, so every softmax of t is unchanged except that
        the verifier's whole end mass sits at the one end the map pairs. A position whose answer end is -inf (a
        grammar, min_tokens or a ban excludes it) is left as it is: nothing revives an excluded end. Idempotent;
        float32 when there are aliases (the rules' dtype), t itself when there are none (no copy)."""
        if not self.end_aliases:
            return t
        key = ("fold", str(t.device))
        if key not in self._cache:
            self._cache[key] = torch.tensor(
                [self.specials["answer_end"][1], *self.end_aliases], device=t.device
            )
        ids = self._cache[key]  # [1 + A]: the answer end, then its aliases
        cols = t[..., ids].float()  # [.., 1 + A]
        end = cols[..., 0]  # [..]
        live = end > float("-inf")
        out = t.to(torch.float32, copy=True)
        out[..., ids[0]] = torch.where(live, cols.logsumexp(-1), end)
        out[..., ids[1:]] = cols[..., 1:].masked_fill(live.unsqueeze(-1), float("-inf"))
        return out

    def to_drafter_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Verifier ids (all in the shared set) -> drafter ids, same shape."""
        out = self.to(ids.device).v2d[ids]
        if (out < 0).any():
            raise ConfigError(
                f"verifier ids {sorted(set(ids[out < 0].tolist()))} are outside the shared set"
            )
        return out

    def to_verifier_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Drafter ids (all in the shared set) -> verifier ids, same shape."""
        out = self.to(ids.device).d2v[ids]
        if (out < 0).any():
            raise ConfigError(
                f"drafter ids {sorted(set(ids[out < 0].tolist()))} are outside the shared set"
            )
        return out

    def drafter_banned(self, banned_v: torch.Tensor | None, device) -> torch.Tensor:
        """[Vd] bool: True outside the shared set and at shared tokens banned in verifier space."""
        d, v, _, _ = self.to(device)
        allowed = torch.zeros(self.drafter_size, dtype=torch.bool, device=device)
        allowed[d] = True if banned_v is None else ~banned_v.to(device)[v]
        return ~allowed

    def verifier_banned(self, banned_v: torch.Tensor | None, device) -> torch.Tensor:
        """[Vv] bool: True outside the shared set or banned."""
        _, v, _, _ = self.to(device)
        outside = torch.ones(self.verifier_size, dtype=torch.bool, device=device)
        outside[v] = False
        return outside if banned_v is None else outside | banned_v.to(device)

    def to_verifier_space(
        self, x_d: torch.Tensor, fill: float = float("-inf")
    ) -> torch.Tensor:
        """Drafter-space values [.., Vd] moved to verifier space [.., Vv]: x_v[v(j)] = x_d[j], `fill` elsewhere."""
        d, v, _, _ = self.to(x_d.device)
        out = torch.full(
            (*x_d.shape[:-1], self.verifier_size),
            fill,
            dtype=x_d.dtype,
            device=x_d.device,
        )
        out[..., v] = x_d[..., d]
        return out

    def to_drafter_space(
        self, x_v: torch.Tensor, fill: float = float("-inf")
    ) -> torch.Tensor:
        """Verifier-space values [.., Vv] read in drafter space [.., Vd]: x_d[j] = x_v[v(j)] for shared j, `fill`
        elsewhere (the columns of every draw across the map, vocab_sampling.py)."""
        d, v, _, _ = self.to(x_v.device)
        out = torch.full(
            (*x_v.shape[:-1], self.drafter_size),
            fill,
            dtype=x_v.dtype,
            device=x_v.device,
        )
        out[..., d] = x_v[..., v]
        return out


def aligned_gate(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    vmap: VocabMap,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CDA gate across the map: a, b [B, K+1, Vd], t [B, K+1, Vv], drafts [B, K] verifier ids ->
    (leading accepted [B], every draft passed [B], D_i [B, K+1]); each softmax over its model's full vocabulary."""
    K = drafts.shape[1]
    la, lb, lt = a.log_softmax(-1), b.log_softmax(-1), t.log_softmax(-1)
    divergence = (
        gate.kl(la, lb) if cfg.gate == "kl" else gate.jsd(la, lb)
    )  # [B, K+1], drafter space
    drafts_d = vmap.to_drafter_ids(drafts)  # [B, K]
    lt_d = (
        lt[:, :K].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    )  # [B, K] log p_t(v(d_i))
    lb_d = (
        lb[:, :K].gather(-1, drafts_d.unsqueeze(-1)).squeeze(-1)
    )  # [B, K] log p_b(d_i)
    accept = lt_d > gate.log_gamma_eff(cfg, la, lb, drafts_d, divergence) + lb_d
    n_acc = gate.leading_accepts(accept, None)
    return n_acc, n_acc == K, divergence


def asymspec_step(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    vmap: VocabMap,
    banned: torch.Tensor | None = None,
) -> gate.StepOutcome:
    """Algorithm 1, lines 8-24, across the map. a [B, K or K+1, Vd] (a_{K+1} only for a fused bonus: b_{K+1}
    stands in, as in dispatch.decide_asymspec), b [B, K+1, Vd]; t [B, K+1, Vv]; drafts [B, K] verifier ids;
    banned [Vv] bool. The emitted token is a verifier id in the shared set."""
    if a.shape[1] == drafts.shape[1]:
        a = torch.cat([a, b[:, -1:]], dim=1)
    a, b, t = a.float(), b.float(), t.float()
    n_acc, is_bonus, divergence = aligned_gate(a, b, t, drafts, cfg, vmap)
    t_p, a_p, b_p = (
        gate.select(t, n_acc),
        gate.select(a, n_acc),
        gate.select(b, n_acc),
    )  # [B, Vv], [B, Vd] x2
    shared_out = vmap.verifier_banned(banned, t.device)  # [Vv]
    fused = gate.greedy(fused_scores(a_p, b_p, t_p, cfg, vmap), shared_out)
    bonus = fused if cfg.bonus == "fused" else gate.greedy(t_p, shared_out)
    return gate.StepOutcome(
        n_acc, torch.where(is_bonus, bonus, fused), is_bonus, divergence
    )


def fused_scores(
    a: torch.Tensor,
    b: torch.Tensor,
    t: torch.Tensor,
    cfg: AsymSpecConfig,
    vmap: VocabMap,
) -> torch.Tensor:
    """t + beta * delta_v across the map, [.., Vv]: delta = a - b (a, b [.., Vd]) moved to verifier space (no
    delta at unshared ids, which are never emitted); t [.., Vv]."""
    if (
        cfg.delta_source == "scd"
    ):  # t - b: b moved to verifier space first (its unshared ids are never emitted)
        delta_v = gate.context_delta(
            vmap.to_verifier_space(a), vmap.to_verifier_space(b, 0.0), t, "scd"
        )
    else:
        delta_v = vmap.to_verifier_space(
            gate.context_delta(a, b, t, cfg.delta_source), 0.0
        )
    return gate.fuse(t, delta_v, cfg.beta)


def shared_scores(
    name: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    width: int,
    vmap: VocabMap,
) -> torch.Tensor:
    """The raw scores of distribution `name` (core/logprobs.py's names) at a step's first `width` positions
    across the map, [B, width, Vv] float32, -inf off the shared set: a token's logprob across a map is under
    its distribution restricted to the tokens the pair can commit (for a one-vocabulary pair, every token)."""
    if (
        "t" in logits
    ):  # the verifier's end aliases folded into its answer end, as the rules read t
        logits = {**logits, "t": vmap.fold_ends(logits["t"][:, :width])}
    if name == "q":  # the drafter alone: no verifier logits
        x = vmap.to_verifier_space(logits["q"][:, :width].float())
    elif name == "t":
        x = logits["t"][:, :width].float()
    else:
        t = logits["t"][:, :width].float()
        b = logits["b"][:, :width].float()
        if name == "contrastive":
            x = contrastive_scores(b, t, cfg, vmap)
        else:
            a = logits["a"][:, :width].float()
            if (
                a.shape[1] < width
            ):  # the bonus position without a_{K+1}: b stands in (as logprobs.scores)
                a = torch.cat([a, b[:, a.shape[1] :]], dim=1)
            x = (
                vmap.to_verifier_space(a)
                if name == "a"
                else fused_scores(a, b, t, cfg, vmap)
            )
    return x.masked_fill(vmap.verifier_banned(None, x.device), float("-inf"))


def decide_sd(
    t: torch.Tensor,
    drafts: torch.Tensor,
    vmap: VocabMap,
    banned: torch.Tensor | None = None,
) -> gate.StepOutcome:
    """SD (and Floor, with no drafts) across the map: greedy verification against t [B, K+1, Vv] restricted to
    the shared set (token-level intersection); drafts [B, K] verifier ids."""
    return gate.greedy_verify(t, drafts, vmap.verifier_banned(banned, t.device))


def contrastive_scores(
    b: torch.Tensor, t: torch.Tensor, cfg: AsymSpecConfig, vmap: VocabMap
) -> torch.Tensor:
    """SCD's target across the map, [B, n, Vv]: (1+beta) log p_t - beta log p_b on the plausible shared tokens,
    -inf elsewhere; log p_b the drafter's own full-vocabulary log-softmax moved to verifier space."""
    lb_v = vmap.to_verifier_space(
        b.float().log_softmax(-1)
    )  # [B, n, Vv], -inf off the shared set
    lt = t.float().log_softmax(-1)
    # gate.scd_scores would re-normalise the moved log p_b over the shared set: the same score, computed here
    # the plausibility cut is relative to the best shared token (the best token overall may be unshared: a cut
    # relative to it could leave no shared token plausible, and the pick would fall to the lowest id)
    # (banned shared tokens count for the cut, as gate.scd_scores counts them: a full map is scd_scores exactly)
    top = (
        lt.masked_fill(vmap.verifier_banned(None, t.device), float("-inf"))
        .max(dim=-1, keepdim=True)
        .values
    )
    plausible = lt >= math.log(cfg.scd_alpha) + top
    score = torch.nan_to_num(
        (1.0 + cfg.beta) * lt - cfg.beta * lb_v, nan=float("-inf"), posinf=float("inf")
    )
    return score.masked_fill(~plausible, float("-inf"))


def decide_scd(
    b: torch.Tensor,
    t: torch.Tensor,
    drafts: torch.Tensor,
    cfg: AsymSpecConfig,
    vmap: VocabMap,
    banned: torch.Tensor | None = None,
) -> gate.StepOutcome:
    """SCD across the map: greedy verification against contrastive_scores. b [B, K+1, Vd], t [B, K+1, Vv]."""
    return gate.greedy_verify(
        contrastive_scores(b, t, cfg, vmap),
        drafts,
        vmap.verifier_banned(banned, t.device),
    )


def decide_drafter(
    q: torch.Tensor, vmap: VocabMap, banned: torch.Tensor | None = None
) -> gate.StepOutcome:
    """Drafter alone across the map: its greedy token over the shared set, as a verifier id. q [B, 1, Vd]."""
    token_d = gate.greedy(q[:, 0].float(), vmap.drafter_banned(banned, q.device))  # [B]
    zero = torch.zeros_like(token_d)
    return gate.StepOutcome(
        zero, vmap.to_verifier_ids(token_d), torch.ones_like(token_d, dtype=torch.bool)
    )


def decide(
    name: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    drafts: torch.Tensor,
    banned: torch.Tensor | None,
    vmap: VocabMap,
) -> gate.StepOutcome:
    """The greedy rule of method `name` across the map (logits by name as in methods.py: a, b, q in drafter
    space, t in verifier space; drafts [B, K] verifier ids). t is read with the verifier's end aliases folded into
    its answer end (VocabMap.fold_ends)."""
    t = vmap.fold_ends(logits["t"]) if "t" in logits else None
    if name == "asymspec":
        return asymspec_step(logits["a"], logits["b"], t, drafts, cfg, vmap, banned)
    if name in ("sd", "floor"):
        return decide_sd(t, drafts, vmap, banned)
    if name == "scd":
        return decide_scd(logits["b"], t, drafts, cfg, vmap, banned)
    if name == "drafter":
        return decide_drafter(logits["q"], vmap, banned)
    raise ConfigError(f"method {name!r} has no rule across a vocabulary map")
