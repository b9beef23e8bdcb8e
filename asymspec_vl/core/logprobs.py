"""Token log-probabilities: each emitted token's logprob and its top alternatives under the distribution it was
chosen from, by one rule that both backends call (the transformers loop and the vLLM sampler).

Values are vLLM's default logprobs_mode "raw_logprobs": log-softmax of the raw scores, before temperature, top-k /
top-p / min-p and banned tokens (the distribution at temperature 1). Each token carries the name of its distribution:
  t            the verifier on x_comp: Floor's tokens, every SD token (SD's output is distributed as the
               verifier's, its accepted drafts included), AsymSpec's bonus token (bonus="verifier")
  q            the drafter on x_question: the drafter alone's tokens
  a            the drafter on x_full: AsymSpec's accepted drafts (the distribution that drafted them)
  fused        softmax(t + beta * delta), Eq. 2's fused scores: AsymSpec's token at the first rejection (and its
               bonus token with bonus="fused")
  contrastive  SCD's contrastive target ((1 + beta) log p_t - beta log p_b on the plausible set, -inf elsewhere,
               gate.scd_scores): every SCD token, accepted drafts included (each is that target's choice)
A step that drafted nothing on the vLLM engine (no room near max_model_len; label trace.VERIFIER) takes t.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import trace as T
from .config import AsymSpecConfig
from .errors import ConfigError
from .gate import StepOutcome, context_delta, fuse, scd_scores
from .vocab_align import VocabMap, shared_scores

NAMES = ("t", "q", "a", "fused", "contrastive")
# method -> the distribution of its accepted drafts, of its token at the first rejection, of its bonus token
DISTRIBUTIONS = {
    "asymspec": T.Labels("a", "fused", "t"),
    "sd": T.Labels("t", "t", "t"),
    "scd": T.Labels("contrastive", "contrastive", "contrastive"),
    "floor": T.Labels("t", "t", "t"),
    "drafter": T.Labels("q", "q", "q"),
}


@dataclass
class TokenLogprob:
    """One emitted token: its log-probability, the top alternatives (most probable first) and their distribution."""

    token_id: int
    logprob: float
    top: list[
        tuple[int, float]
    ]  # (token id, logprob) of the cfg.logprobs most probable tokens
    distribution: str  # one of NAMES

    def to_dict(self) -> dict:
        return {
            "token_id": self.token_id,
            "logprob": self.logprob,
            "top": [list(x) for x in self.top],
            "distribution": self.distribution,
        }


def labels(method: str, cfg: AsymSpecConfig) -> T.Labels:
    """The distributions of a method's tokens, as trace.Labels (accepted, rejected, all_passed)."""
    out = DISTRIBUTIONS[method]
    if method == "asymspec" and cfg.bonus == "fused":
        return T.Labels(out.accepted, out.rejected, "fused")
    return out


def distribution(method: str, cfg: AsymSpecConfig, source: str) -> str:
    """The distribution of a token from its source label (trace.TOKEN_SOURCES) in a run of `method`."""
    names, sources = labels(method, cfg), T.LABELS[method]
    by_source = {
        sources.accepted: names.accepted,
        sources.rejected: names.rejected,
        sources.all_passed: names.all_passed,
    }
    return by_source.get(
        source, "t"
    )  # trace.VERIFIER: a step without drafts (vLLM near max_model_len)


def scores(
    name: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    width: int,
    vmap: VocabMap | None = None,
) -> torch.Tensor:
    """The raw scores of distribution `name` at the step's first `width` positions: [B, width, V] float32.
    logits by name as the rule reads them (methods.py); a may stop one position short (the bonus without it).
    Across a cross-family pair's map: in verifier ids, restricted to the shared set (vocab_align.shared_scores)."""
    if vmap is not None:
        return shared_scores(name, cfg, logits, width, vmap)
    if name in ("t", "q"):
        return logits[name][:, :width].float()
    t, b = logits["t"][:, :width].float(), logits["b"][:, :width].float()
    if name == "contrastive":
        return scd_scores(t, b, cfg.beta, cfg.scd_alpha)
    a = logits["a"][:, :width].float()
    if (
        a.shape[1] < width
    ):  # the bonus position without a_{K+1}: never read there (bonus="verifier"); b fills it
        a = torch.cat([a, b[:, a.shape[1] :]], dim=1)
    if name == "a":
        return a
    return fuse(t, context_delta(a, b, t, cfg.delta_source), cfg.beta)


def step_scores(
    method: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    num_accepted: torch.Tensor,
    num_drafts: int,
    vmap: VocabMap | None = None,
) -> tuple[torch.Tensor, list[list[str]]]:
    """The raw scores each committed position of the step was chosen from, [B, K+1, V] float32, and each row's
    distribution names for its committed tokens. num_accepted [B]: the drafts each row kept; position j below it
    reads the accepted draft's distribution, j = num_accepted the emitted token's, later positions are unused."""
    width = num_drafts + 1
    names = [
        T.step_sources(labels(method, cfg), num_drafts, n)
        for n in num_accepted.tolist()
    ]
    used = dict.fromkeys(x for row in names for x in row)
    by_name = {name: scores(name, cfg, logits, width, vmap) for name in used}
    out = by_name["t"] if "t" in by_name else next(iter(by_name.values()))
    for name, x in by_name.items():
        if x is out:
            continue
        at = torch.tensor(
            [[j < len(row) and row[j] == name for j in range(width)] for row in names]
        ).to(
            out.device, non_blocking=True
        )  # [B, K+1]: the positions chosen from `name`
        out = torch.where(at[..., None], x, out)
    return out, names


def token_logprobs(
    scores: torch.Tensor, tokens: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log-softmax of raw scores [..., V] at tokens [...]: (logprob [...], top-k ids [..., k], their logprobs
    [..., k]); k is capped at the vocabulary."""
    lp = scores.float().log_softmax(-1)
    top = lp.topk(min(k, lp.shape[-1]), dim=-1)
    return lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), top.indices, top.values


def step_logprobs(
    method: str,
    cfg: AsymSpecConfig,
    logits: dict[str, torch.Tensor],
    outcome: StepOutcome,
    drafts: torch.Tensor,
    k: int,
    vmap: VocabMap | None = None,
) -> list[list[TokenLogprob]]:
    """Per row, the TokenLogprob of each token the step commits (outcome.committed(drafts)), with k alternatives
    (vmap: a cross-family pair's map; token ids are the verifier's)."""
    num_drafts = drafts.shape[1]
    raw, names = step_scores(
        method, cfg, logits, outcome.num_accepted, num_drafts, vmap
    )
    committed = outcome.committed(drafts)
    tokens = torch.tensor(
        [row + [row[-1]] * (num_drafts + 1 - len(row)) for row in committed],
        device=raw.device,
    )  # [B, K+1], padded past the committed tokens
    value, top_ids, top_lp = token_logprobs(raw, tokens, k)
    value, top_ids, top_lp = value.tolist(), top_ids.tolist(), top_lp.tolist()
    return [
        [
            TokenLogprob(
                tok, value[r][j], list(zip(top_ids[r][j], top_lp[r][j])), names[r][j]
            )
            for j, tok in enumerate(row)
        ]
        for r, row in enumerate(committed)
    ]


@dataclass
class PromptLogprob:
    """One prompt token after the tokens before it, under the verifier on x_comp (vLLM's prompt_logprobs)."""

    token_id: int
    logprob: float
    rank: int  # 1 + the number of tokens more probable there (vLLM's Logprob.rank)
    top: list[
        tuple[int, float]
    ]  # (token id, logprob) of the k most probable tokens, most probable first

    def to_dict(self) -> dict:
        return {
            "token_id": self.token_id,
            "logprob": self.logprob,
            "rank": self.rank,
            "top": [list(x) for x in self.top],
        }


def prompt_logprobs(
    logits: torch.Tensor, prompt: list[int], k: int
) -> list[PromptLogprob | None]:
    """The verifier's logits over its prompt [P, V] (position i scores token i + 1) -> one entry per prompt token,
    None for the first (nothing precedes it), as vLLM returns them."""
    lp = logits[: len(prompt) - 1].float().log_softmax(-1)  # [P-1, V]
    tokens = torch.tensor(prompt[1:], device=lp.device)
    value = lp.gather(-1, tokens[:, None])  # [P-1, 1]
    rank = (lp > value).sum(-1) + 1  # [P-1]
    top = lp.topk(min(k, lp.shape[-1]), dim=-1)
    value, rank, ids, vals = (
        value[:, 0].tolist(),
        rank.tolist(),
        top.indices.tolist(),
        top.values.tolist(),
    )
    return [None] + [
        PromptLogprob(tok, value[i], rank[i], list(zip(ids[i], vals[i])))
        for i, tok in enumerate(prompt[1:])
    ]


def check_prompt_logprobs(method: str, cfg: AsymSpecConfig) -> None:
    """ConfigError for prompt_logprobs where no verifier reads a prompt: the drafter alone."""
    if cfg.prompt_logprobs is not None and method == "drafter":
        raise ConfigError(
            "prompt_logprobs are the verifier's over its prompt (x_comp); the drafter alone runs no "
            "verifier: ask them with another method"
        )
