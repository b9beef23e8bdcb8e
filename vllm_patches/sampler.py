"""The sampler of an asymspec engine: the project's gate/fusion math in place of vLLM's rejection sampler.

Per request, this step's verifier logits t come in vLLM's flattened layout (num_drafts + 1 rows each).
  mode asymspec  a = the proposer's x_full logits at the draft positions, b = the drafter's x_comp-view
                 logits at the verified positions, t; the decision is loop.plan_asymspec's (gate.asymspec_step)
  mode sd        greedy verification of the drafts against t (loop.plan_sd)
  mode scd       greedy verification against SCD's contrastive target from t and b (loop.plan_scd)
  plain          requests without extra_args: greedy verification, or vLLM's own sampler when they sample
The first step of a primed request emits its prime token (x_comp's last prompt token, moved to the output
by the scheduler patch), so that, as in Algorithm 1, every emitted token goes through the decision rule;
likewise the prefill that resumes a preempted request emits the output token held back at the preemption.
Rows are decided in groups of equal (mode, config, number of drafts, banned set). The drafts vLLM hands back
for verification are always a prefix of the request's last proposal: the scheduler only trims them (to the
step's token budget, to max_model_len, to none for a prefill chunk), so the proposer's stored logits a and b
belong to them; a step with no drafts left takes the verifier's greedy token.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from asymspec_vl import loop
from asymspec_vl.gate import greedy_verify

from .request_args import RequestArgsError, is_plain_greedy

PLACEHOLDER = -1


def sample(runner, logits: torch.Tensor, spec_meta, logits_indices: torch.Tensor, stock_sample):
    from vllm.v1.outputs import SamplerOutput

    prop, batch = runner.drafter, runner.input_batch
    B = batch.num_reqs
    n_drafts = list(spec_meta.num_draft_tokens) if spec_meta is not None else [0] * B
    first = [0]
    for n in n_drafts:
        first.append(first[-1] + n + 1)
    drafts_flat = spec_meta.draft_token_ids.tolist() if spec_meta is not None else []
    out = torch.full((B, max(n_drafts) + 1), PLACEHOLDER, dtype=torch.int32)
    groups, stock_rows = defaultdict(list), []
    d_at = 0
    for i, req_id in enumerate(batch.req_ids):
        n, st = n_drafts[i], prop.row(req_id)
        drafts, d_at = drafts_flat[d_at:d_at + n], d_at + n
        req = runner.requests[req_id]
        if st.reemit is not None and len(req.output_token_ids) == st.reemit[1]:
            out[i, 0] = st.reemit[0]  # a resumed prefill (after a preemption) emits the held-back token again
        elif st.prime is not None and not req.output_token_ids:
            out[i, 0] = st.prime  # the prime step (partial prefills are discarded by the runner)
        elif st.args is None or st.failed:
            if not (st.failed or is_plain_greedy(req.sampling_params) or _sampling_ok(prop, req_id, st)):
                stock_rows.append(i)
                continue
            groups[("plain", n, None, st.banned_ids)].append((i, drafts))
        elif n == 0:  # no drafts fit (the scheduler trims them near max_model_len): the verifier's greedy token
            groups[("plain", n, None, st.banned_ids)].append((i, drafts))
        else:  # the drafts are a prefix of this request's last proposal: the scheduler only ever trims them
            groups[(st.mode, n, st.args.cfg, st.banned_ids)].append((i, drafts))
    for (mode, n, cfg, _), rows in groups.items():
        idx = [i for i, _ in rows]
        t = torch.stack([logits[first[i]:first[i] + n + 1] for i in idx])  # [G, n+1, V]
        d = torch.tensor([dr for _, dr in rows], dtype=torch.long, device=t.device).view(len(idx), n)
        st0 = prop.row(batch.req_ids[idx[0]])
        outcome = _decide(mode, cfg, n, t, d, idx, first, logits_indices, prop, batch, st0.banned)
        for j, (i, committed) in enumerate(zip(idx, outcome.committed(d))):
            out[i, :len(committed)] = torch.tensor(committed, dtype=torch.int32)
    if stock_rows:
        _stock(stock_rows, out, logits, spec_meta, stock_sample)
    return SamplerOutput(sampled_token_ids=out.to(logits.device), logprobs_tensors=None)


def _decide(mode, cfg, n, t, d, idx, first, logits_indices, prop, batch, banned):
    if mode == "plain":
        return greedy_verify(t, d, banned)
    step_cfg = cfg.replace(K=n)
    if mode == "sd":
        return loop.plan_sd(step_cfg, None, None, banned).decide(None, [t], d)
    token_idx = torch.cat([logits_indices[first[i]:first[i] + n + 1] for i in idx])
    b = prop.comp_logits(token_idx).view(len(idx), n + 1, -1)  # [G, n+1, V] drafter on x_comp
    if mode == "scd":
        return loop.plan_scd(step_cfg, None, None, banned).decide(b, [t], d)
    stored = cfg.K + (cfg.bonus == "fused")  # x_full logits the proposer kept: a_1..a_K (and a_{K+1})
    a = prop.full_view_logits([batch.req_ids[i] for i in idx], min(n + 1, stored))  # [G, n or n+1, V]
    return loop.plan_asymspec(step_cfg, None, None, None, banned).decide(a, [b, t], d)


def _sampling_ok(prop, req_id, st) -> bool:
    """Sampling requests go to vLLM's own (rejection) sampler, which needs the GPU build; on the CPU
    build the request fails alone (and this step decodes it greedily)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    prop.fail(req_id, st, RequestArgsError(
        "speculative decoding on the CPU build decodes greedily only: use temperature=0"))
    return True


def _stock(rows, out, logits, spec_meta, stock_sample) -> None:
    sampled = stock_sample(logits, spec_meta).sampled_token_ids.to("cpu", torch.int32)
    for i in rows:
        out[i, :sampled.shape[1]] = sampled[i]
