"""The sampler of an asymspec engine: each request's method rule (asymspec_vl.core.methods) in place of vLLM's
rejection sampler.

Per request, this step's verifier logits t come in vLLM's flattened layout (num_drafts + 1 rows each). A
request's parsed AsymSpecRequest carries its method; the rule reads the logits it needs by name:
  t  the verifier's, this step
  b  the proposer's on x_comp at the verified positions (the proposer's x_comp pass of this step)
  a  the proposer's on x_full at the draft positions (kept by the proposer since it drafted them)
Requests without extra_args are plain speculative decoding: greedy verification (SD's rule), or vLLM's own
sampler when they sample. When a row asks for logprobs, the step returns vLLM's LogprobsTensors of the committed
tokens in the rejection sampler's layout ([num_reqs * (max drafts + 1)] rows, row-major over the output, rows
past a row's tokens filtered out by vLLM): log-softmax of the verifier's raw logits t (vLLM's default
logprobs_mode, raw_logprobs; raw_logits returns t itself), so vLLM's server never reads an empty list. A hidden token (hidden_tokens.py) is emitted instead of a decision. Rows are
decided in groups of equal (method, config, number of drafts, banned set). The drafts vLLM hands back for
verification are always a prefix of the request's last proposal: the scheduler only trims them (to the step's
token budget, to max_model_len, to none for a prefill chunk), so the proposer's stored logits belong to them;
a step with no drafts left takes the verifier's greedy token.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from asymspec_vl.core.methods import PLAIN_SPECULATIVE

from .requests import hidden_tokens
from .requests.request_args import RequestArgsError, decodes_greedily
from .version import is_cpu_build

PLACEHOLDER = -1  # vLLM's padding of sampled_token_ids past the committed tokens


def sample(runner, logits: torch.Tensor, spec_meta, logits_indices: torch.Tensor, stock_sample):
    """logits: [num_tokens, V] the verifier's at the verified positions (n_i + 1 rows per request);
    logits_indices: [num_tokens] their token indices in this step's inputs. -> vLLM's SamplerOutput."""
    from vllm.v1.outputs import SamplerOutput

    proposer, batch = runner.drafter, runner.input_batch  # vLLM names the proposer `drafter`
    num_drafts = list(spec_meta.num_draft_tokens) if spec_meta is not None else [0] * batch.num_reqs
    first = [0]  # first logits row of each request
    for n in num_drafts:
        first.append(first[-1] + n + 1)
    draft_ids = spec_meta.draft_token_ids.tolist() if spec_meta is not None else []
    out = torch.full((batch.num_reqs, max(num_drafts) + 1), PLACEHOLDER, dtype=torch.int32)
    groups, stock_rows, offset = defaultdict(list), [], 0
    for i, req_id in enumerate(batch.req_ids):
        n, state = num_drafts[i], proposer.row(req_id)
        drafts, offset = draft_ids[offset:offset + n], offset + n
        request = runner.requests[req_id]
        hidden = hidden_tokens.token_instead_of_sample(state, request.output_token_ids)
        if hidden is not None:
            out[i, 0] = hidden
        elif state.request is None or state.failed:
            if not (state.failed or decodes_greedily(request.sampling_params) or _refuse_sampling(proposer, req_id,
                                                                                                   state)):
                stock_rows.append(i)
                continue
            groups[(PLAIN_SPECULATIVE, n, None, state.banned_ids)].append((i, drafts))
        elif n == 0:  # no drafts fit (the scheduler trims them near max_model_len): the verifier's greedy token
            groups[(PLAIN_SPECULATIVE, 0, None, state.banned_ids)].append((i, drafts))
        else:
            groups[(state.method, n, state.request.cfg, state.banned_ids)].append((i, drafts))
    for (method, n, cfg, _), rows in groups.items():
        index = [i for i, _ in rows]
        drafts = torch.tensor([d for _, d in rows], dtype=torch.long, device=logits.device).view(len(index), n)
        banned = proposer.row(batch.req_ids[index[0]]).banned
        step_logits = _logits(method, proposer, batch, logits, logits_indices, first, index, drafts, cfg)
        outcome = method.decide(cfg, step_logits, drafts, banned)
        _put_rows(out, index, outcome.committed(drafts))
    if stock_rows:
        _stock(stock_rows, out, logits, spec_meta, stock_sample)
    return SamplerOutput(sampled_token_ids=out.to(logits.device),
                         logprobs_tensors=_logprobs(runner, out, logits, first))


def _put_rows(out: torch.Tensor, index: list[int], committed: list[list[int]]) -> None:
    """out[index[j], :len(committed[j])] = committed[j] for a group's rows, in one host tensor and one copy
    (rows shorter than the group's longest keep PLACEHOLDER past their tokens)."""
    width = max(len(c) for c in committed)
    block = torch.tensor([c + [PLACEHOLDER] * (width - len(c)) for c in committed], dtype=torch.int32)  # [G, w]
    out[torch.tensor(index), :width] = block


def _logits(method, proposer, batch, logits, logits_indices, first, index, drafts, cfg) -> dict[str, torch.Tensor]:
    """The logits the method's rule reads, for the rows `index` with their drafts [G, n]: t, b [G, n+1, V];
    a [G, n or n+1, V]. A test recording wraps this function while it is on."""
    n = drafts.shape[1]
    out = {"t": torch.stack([logits[first[i]:first[i] + n + 1] for i in index])}
    if "b" in method.reads:
        token_index = torch.cat([logits_indices[first[i]:first[i] + n + 1] for i in index])
        out["b"] = proposer.comp.logits(token_index).view(len(index), n + 1, -1)
    if "a" in method.reads:
        stored = proposer.row(batch.req_ids[index[0]]).request.num_draft_logits  # a_1..a_K (and a_{K+1})
        out["a"] = proposer.full.logits([batch.req_ids[i] for i in index], min(n + 1, stored))
    return out


def _logprobs(runner, out: torch.Tensor, logits: torch.Tensor, first: list[int]):
    """vLLM's LogprobsTensors of this step's tokens `out` [B, W] (-1 past a row's tokens), or None when no row
    asks for them: position j of row i reads logits row first[i] + j (clamped to the row's last)."""
    k = runner.input_batch.max_num_logprobs
    if k is None:
        return None
    width = out.shape[1]
    last = torch.tensor(first[1:]) - 1  # [B] each row's last logits row
    index = torch.minimum(torch.tensor(first[:-1])[:, None] + torch.arange(width), last[:, None]).flatten()
    tokens = out.flatten().long().clamp(min=0).to(logits.device)  # [B * W] placeholders read token 0, as vLLM's
    t = logits[index.to(logits.device)]  # [B * W, V]
    mode = getattr(getattr(runner, "sampler", None), "logprobs_mode", "raw_logprobs")
    scores = t.float() if mode == "raw_logits" else runner.sampler.compute_logprobs(t)
    return runner.sampler.gather_logprobs(scores, k, tokens)


def _refuse_sampling(proposer, req_id, state) -> bool:
    """Sampling requests go to vLLM's own (rejection) sampler, which needs the GPU build; on the CPU
    build the request fails alone (and this step decodes it greedily)."""
    if not is_cpu_build():
        return False
    proposer.fail(req_id, state, RequestArgsError(
        "speculative decoding on the CPU build decodes greedily only: use temperature=0 and no penalties, "
        "logit_bias, bad_words, allowed_token_ids or min_tokens (logprobs are served)"))
    return True


def _stock(rows, out, logits, spec_meta, stock_sample) -> None:
    sampled = stock_sample(logits, spec_meta).sampled_token_ids.to("cpu", torch.int32)
    for i in rows:
        out[i, :sampled.shape[1]] = sampled[i]
