"""vLLM's per-token logprobs of a completion (SampleLogprobs: one {token id: Logprob} dict per token) as the
library's TokenLogprob, each named by the distribution its token was chosen from (core/logprobs.py)."""

from __future__ import annotations

from ...core.config import AsymSpecConfig
from ...core.logprobs import PromptLogprob, TokenLogprob, distribution


class MissingLogprobsError(RuntimeError):
    """The engine returned no logprobs entry for some token that was asked for (never an empty list)."""


def from_vllm(
    entries, tokens: list[int], sources: list[str], method: str, cfg: AsymSpecConfig
) -> list[TokenLogprob]:
    """entries: vLLM's CompletionOutput.logprobs for `tokens`; sources: each token's trace label. The top list is
    the entries of rank <= cfg.logprobs (vLLM adds the emitted token beside its top-k when it ranks lower)."""
    entries = list(entries or [])
    if len(entries) < len(tokens):
        raise MissingLogprobsError(
            f"the engine returned {len(entries)} logprobs entries for {len(tokens)} tokens"
        )
    out = []
    for tok, entry, source in zip(tokens, entries, sources):
        if tok not in entry:
            raise MissingLogprobsError(
                f"the engine's logprobs entry of token {tok} lacks that token: {entry}"
            )
        out.append(
            TokenLogprob(
                tok,
                entry[tok].logprob,
                ranked(entry, cfg.logprobs),
                distribution(method, cfg, source),
            )
        )
    return out


def prompt_from_vllm(entries, prompt: list[int], k: int) -> list[PromptLogprob | None]:
    """entries: vLLM's RequestOutput.prompt_logprobs (None, then one {token id: Logprob} per prompt token after
    the first) -> PromptLogprob entries, the top list those of rank <= k."""
    entries = list(entries or [])
    if len(entries) != len(prompt):
        raise MissingLogprobsError(
            f"the engine returned {len(entries)} prompt logprobs entries for a prompt of "
            f"{len(prompt)} tokens"
        )
    out: list[PromptLogprob | None] = [None]
    for tok, entry in zip(prompt[1:], entries[1:]):
        if not entry or tok not in entry:
            raise MissingLogprobsError(
                f"the engine's prompt logprobs entry of token {tok} lacks that token"
            )
        out.append(
            PromptLogprob(tok, entry[tok].logprob, entry[tok].rank, ranked(entry, k))
        )
    return out


def ranked(entry: dict, k: int) -> list[tuple[int, float]]:
    """(token id, logprob) of an entry's tokens of rank <= k, best first (vLLM adds the scored token beside its
    top-k when that token ranks lower)."""
    top = sorted(
        (x.rank, i, x.logprob)
        for i, x in entry.items()
        if x.rank is not None and x.rank <= k
    )
    return [(i, lp) for _, i, lp in top]
