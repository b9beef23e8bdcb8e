"""A plain engine row's logprobs over a support: a cross-family drafter alone's are under its distribution restricted
to the shared set and normalised over it (docs/cross-family.md), so the ids outside it are -inf in the logits its
sampler reads.

vLLM's Sampler computes a row's raw logprobs from the logits it is handed, before its logits processors
(v1/sample/sampler.py, `forward`: compute_logprobs, then apply_logits_processors): an id -inf there has logprob -inf
and the others are normalised over the rest. The client sends those ids only with a logit_bias of -inf at each of
them (vllm_backend._params), so the row's sampling is unchanged: its own sampler bans them anyway.
"""

from __future__ import annotations

import torch

# SamplingParams.extra_args key: the ids outside a row's logprobs support (drafter ids, sorted)
SUPPORT_KEY = "asymspec_logprobs_outside"
_CACHE_ATTR = "asymspec_logprob_support"  # runner attribute: req_id -> those ids on the logits' device


def restrict(runner, logits: torch.Tensor | None) -> None:
    """Before a plain engine's sampler: each row asking for logprobs whose request names ids outside its support
    (SUPPORT_KEY) gets them -inf in `logits` [num_reqs, V] (one row per request in batch order: a plain engine has
    no drafts), in place. Each request's index tensor is made once, on the logits' device."""
    batch = runner.input_batch
    if logits is None or batch.max_num_logprobs is None:
        return  # the common step: no row asks for logprobs
    cache, live = getattr(runner, _CACHE_ATTR, {}), {}
    for i, req_id in enumerate(batch.req_ids):
        params = runner.requests[req_id].sampling_params
        outside = (params.extra_args or {}).get(SUPPORT_KEY) if params else None
        if not outside or req_id not in batch.num_logprobs:
            continue
        index = cache.get(req_id)
        if index is None:
            index = torch.tensor(outside, dtype=torch.long, device=logits.device)
        live[req_id] = index
        logits[i].index_fill_(0, index, float("-inf"))
    setattr(runner, _CACHE_ATTR, live)  # requests that left the batch are dropped
