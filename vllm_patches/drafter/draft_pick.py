"""The pick of one draft position for the proposer's rows, on either view: each row's greedy token, or, for a
request that samples, a draw from its filtered distribution with its own generator (asymspec_vl.core.sampling,
the transformers loop's Plan.pick); the stop tokens -inf first below a request's min_tokens (core.min_tokens).
On a cross-family engine (vmap) the logits are the drafter's [R, Vd]: greedy over its shared set (banned holds
the unshared ids), and a sampling row draws with core.vocab_sampling.pick over the drafter's columns (the
unshared and banned ids at probability 0) with its verifier-id mask (RowState.banned_v), as Plan.pick does, so
its generator consumes the same draws; the drawn token comes back in the drafter's ids (the views feed them;
full_view.drafts_both_ids maps them). Every draw stays on the logits' device, where the request's generator
lives (rows.py; vLLM's are CUDA ones)."""

from __future__ import annotations

import torch

from asymspec_vl.core import sampling, vocab_sampling
from asymspec_vl.core.gate import greedy
from asymspec_vl.core.min_tokens import hold_stops


def pick(
    logits: torch.Tensor,
    states: list,
    k: int,
    banned: torch.Tensor,
    keep=None,
    vmap=None,
) -> torch.Tensor:
    """Draft k (0-based) of each row: logits [R, V] of the rows' RowStates `states`, banned [R, V] -> [R]. Rows
    that neither sample nor hold take greedy(logits, banned) exactly; a sampling row draws while k < its K (a
    pass past its drafts, a_{K+1}'s, draws nothing). keep: a DraftLogits that stores the logits a sampling
    row's draft was drawn from (q of sd and scd, read by the sampler). vmap: a cross-family engine's VocabMap
    (None: one vocabulary); the tokens are drafter ids either way."""
    held = [r for r, s in enumerate(states) if s.holds(s.y_len + k)]
    for r in held:  # [1, 1, V] each
        s = states[r]
        logits = logits.clone() if r == held[0] else logits
        logits[r] = hold_stops(
            logits[r][None, None],
            [s.y_len],
            k,
            s.request.cfg.min_tokens,
            s.request.stop_ids if s.stop_ids_d is None else s.stop_ids_d,
        )[0, 0]
    tokens = greedy(logits, banned)  # [R]
    for r, s in enumerate(states):
        if s.samples and k < s.K:  # one draw per row: its own config and generator
            if vmap is None:
                lp = sampling.filtered_logprobs(
                    logits[r][None], s.request.cfg, banned[r]
                )  # [1, V]
                tokens[r] = sampling.draw(lp, [s.generator])[0]
            else:  # over the drafter's columns, a verifier id back to the drafter's
                drawn = vocab_sampling.pick(
                    logits[r][None], s.request.cfg, s.banned_v, vmap, [s.generator]
                )  # [1] verifier id
                tokens[r] = vmap.to(logits.device).v2d[drawn][0]
            if keep is not None:
                keep.put(s.req_id, k, logits[r])
    return tokens
