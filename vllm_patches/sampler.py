"""The sampler of an asymspec engine: each request's method rule (asymspec_vl.core.methods) in place of vLLM's
rejection sampler.

Per request, this step's verifier logits t come in vLLM's flattened layout (num_drafts + 1 rows each). A
request's parsed AsymSpecRequest carries its method; the rule reads the logits it needs by name:
  t  the verifier's, this step
  b  the proposer's on x_comp at the verified positions (the proposer's x_comp pass of this step)
  a  the proposer's on x_full at the draft positions (kept by the proposer since it drafted them)
  sd / drafted  (a request that samples) the proposer's x_comp drafting logits q at the draft positions
Where a request samples (vLLM's temperature >= 1e-5; its parsed cfg holds temperature, top_p, top_k, min_p, seed)
the method's sampled rule decides (method.sample, asymspec_vl.core.sampling: AsymSpec's gate with the emitted
token drawn from filtered(t + beta * delta); lossless speculative sampling for SD against t and for SCD against
its contrastive target, with the exact q the drafts were drawn from), with the request's own generator
(rows.RowState.generator: the drafts were drawn from it too, draft_pick.py); otherwise the greedy rule. Below a
request's min_tokens its stop tokens are -inf in every logits the step reads (core.min_tokens, as the
transformers loop does): vLLM's logits processors (min_tokens, penalties, logit_bias, bad words) run inside the
rejection sampler this replaces, so none of them has touched the logits here; only the grammar bitmask of a
structured output has (sample_tokens applies it before _sample). Requests without extra_args are plain
speculative decoding: greedy verification (SD's rule), or vLLM's own sampler when they sample (refused on the
CPU build, which has no rejection sampler kernels). When a row asks for logprobs, the step returns vLLM's
LogprobsTensors of the committed tokens in the rejection sampler's layout ([num_reqs * (max drafts + 1)] rows,
row-major over the output, rows past a row's tokens filtered out by vLLM): log-softmax (vLLM's default
logprobs_mode, raw_logprobs; raw_logits returns the scores themselves) of the raw scores each token was chosen
from, by asymspec_vl/core/logprobs.py's rule (AsymSpec: a for an accepted draft, t + beta * delta for the fused
token, t for the bonus; SCD: its contrastive target; SD, Floor and plain requests: t), so vLLM's server never
reads an empty list. A hidden token (hidden_tokens.py) is emitted instead of a decision. Rows are decided in groups of
equal (method, config but its seed, number of drafts, banned set, stop set). The drafts vLLM hands back for
verification are
always a prefix of the request's last proposal: the scheduler only trims them (to the step's token budget, to
max_model_len, to none for a prefill chunk), so the proposer's stored logits belong to them; a step with no
drafts left takes SD's rule at K = 0 (the verifier's greedy token, or a draw from filtered(t)).
On a cross-family engine (proposer.vmap, a VocabMap) every group is decided by core/vocab_align.py's greedy rules
(the transformers loop's): t in verifier ids, a and b in the drafter's, drafts in verifier ids, each row's
verifier-id mask (RowState.banned_v); its logprobs read vocab_align.shared_scores. A group that samples there
takes core/vocab_sampling.py's sampled rule of its method (Plan.decide's), every draw over the drafter's columns
(its unshared ids at probability 0) with the rows' generators on the logits' device, after drafts drawn the same
way (draft_pick.py; sd / scd's q is the drafter's own x_comp view's drafting logits, kept in draft_logits). What a
cross-family engine refuses per request: engine_map.cross_family_refusal. A row with a structured output whose rule
chose where the grammar allows no token it may commit (across a map: no shared token) commits its accepted drafts
only, or fails alone (grammar_dead_end.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from asymspec_vl.core import row_chunks, vocab_align, vocab_sampling
from asymspec_vl.core.methods import DRAFTED, PLAIN_SPECULATIVE
from asymspec_vl.core.min_tokens import hold_stops

from .grammar_dead_end import cut_dead_ends
from .requests import hidden_tokens
from .requests.request_args import RequestArgsError, decodes_greedily
from .sampler_logprobs import StepLogprobs
from .version import is_cpu_build

PLACEHOLDER = -1  # vLLM's padding of sampled_token_ids past the committed tokens


@dataclass(frozen=True)
class StepBatch:
    """What the sampler reads of this step's batch (vLLM's InputBatch and the runner's CachedRequestStates)."""

    req_ids: list[str]  # [B] in batch order
    outputs: list[
        list[int]
    ]  # [B] each request's output_token_ids (vLLM's lists: y, and a prime token)
    params: list  # [B] each request's SamplingParams
    num_logprobs: dict  # req_id -> logprobs asked for (rows asking for none are absent)
    max_num_logprobs: int | None  # None: no row asks for logprobs

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @classmethod
    def of(cls, input_batch, requests: dict) -> StepBatch:
        """input_batch: vLLM's InputBatch; requests: the runner's req_id -> CachedRequestState."""
        req_ids = list(input_batch.req_ids)
        return cls(
            req_ids,
            [requests[r].output_token_ids for r in req_ids],
            [requests[r].sampling_params for r in req_ids],
            input_batch.num_logprobs,
            input_batch.max_num_logprobs,
        )


def sample(
    proposer,
    batch: StepBatch,
    logits: torch.Tensor,
    spec_meta,
    logits_indices: torch.Tensor,
    stock_sample,
    vllm_sampler,
):
    """logits: [num_tokens, V] the verifier's at the verified positions (n_i + 1 rows per request);
    logits_indices: [num_tokens] their token indices in this step's inputs; spec_meta: vLLM's
    SpecDecodeMetadata (None: no drafts); stock_sample(logits, spec_meta): vLLM's own sampling; vllm_sampler:
    vLLM's Sampler (its logprobs). -> vLLM's SamplerOutput."""
    from vllm.v1.outputs import SamplerOutput  # lazy: loads vLLM

    num_drafts = (
        list(spec_meta.num_draft_tokens)
        if spec_meta is not None
        else [0] * batch.num_reqs
    )
    first = [0]  # first logits row of each request
    for n in num_drafts:
        first.append(first[-1] + n + 1)
    draft_ids = spec_meta.draft_token_ids.tolist() if spec_meta is not None else []
    out = torch.full(
        (batch.num_reqs, max(num_drafts) + 1), PLACEHOLDER, dtype=torch.int32
    )
    groups, stock_rows, offset = defaultdict(list), [], 0
    for i, req_id in enumerate(batch.req_ids):
        n, state = num_drafts[i], proposer.row(req_id)
        drafts, offset = draft_ids[offset : offset + n], offset + n
        hidden = hidden_tokens.token_instead_of_sample(state, batch.outputs[i])
        if hidden is not None:
            out[i, 0] = hidden
        elif state.request is None or state.failed:
            if not (
                state.failed
                or decodes_greedily(batch.params[i])
                or _refuse_sampling(proposer, req_id, state)
            ):
                stock_rows.append(i)
                continue
            groups[(PLAIN_SPECULATIVE, n, None, state.banned_ids, ())].append(
                (i, drafts)
            )
        else:  # with no drafts (Floor; drafts trimmed near max_model_len) SD's rule at K = 0: t's token
            method = state.method if n else PLAIN_SPECULATIVE
            groups[
                (method, n, state.rule_cfg, state.banned_ids, state.request.stop_ids)
            ].append((i, drafts))
    logprobs = (
        StepLogprobs(batch, vllm_sampler, logits, first, out.shape[1])
        if batch.max_num_logprobs is not None
        else None
    )
    # a group's rows a chunk at a time: its transient memory bounded independent of batch (core/row_chunks.py)
    positions = out.shape[1] if logprobs is not None else None
    for (method, n, cfg, _, stop_ids), rows in groups.items():
        size = row_chunks.rows_per_chunk(positions or n + 1, _vocab(proposer, logits))
        for part in row_chunks.spans(len(rows), size):
            _decide(
                proposer,
                batch,
                (method, n, cfg, stop_ids),
                rows[part],
                (logits, logits_indices, first),
                out,
                logprobs,
            )
    if stock_rows:
        _stock(stock_rows, out, logits, spec_meta, stock_sample)
    return SamplerOutput(
        sampled_token_ids=out.to(logits.device),
        logprobs_tensors=logprobs.tensors(out) if logprobs is not None else None,
    )


def _vocab(proposer, logits: torch.Tensor) -> int:
    """The widest vocabulary a rule reads: the verifier's, or across a map the wider of the two."""
    vmap = proposer.vmap
    return max(logits.shape[-1], vmap.drafter_size if vmap is not None else 0)


def _decide(proposer, batch, key, rows, step, out, logprobs) -> None:
    """One chunk of a group: its rows' logits, min_tokens' hold, the method's rule, a structured output's dead ends,
    their tokens in out [B, W] and their logprobs (logprobs: the step's StepLogprobs, or None). key: the group's
    (method, number of drafts, rule config, stop ids); rows: (batch row, drafts) of the chunk; step: (the
    verifier's logits [num_tokens, V], their token indices, each row's first logits row)."""
    method, n, cfg, stop_ids = key
    logits, logits_indices, first = step
    index = [i for i, _ in rows]
    host_drafts = [d for _, d in rows]  # [G][n]
    drafts = (  # [G, n]: a copy that does not block (the host lists are read below)
        torch.tensor(host_drafts, dtype=torch.long)
        .view(len(index), n)
        .to(logits.device, non_blocking=True)
    )
    states = [proposer.row(batch.req_ids[i]) for i in index]
    step_logits = _logits(
        method, proposer, batch, logits, logits_indices, first, index, drafts, cfg
    )
    if (
        cfg is not None and cfg.min_tokens
    ):  # every logits of the step, from output position len(y) on
        produced = [s.num_committed(batch.outputs[i]) for s, i in zip(states, index)]
        stops = {  # across a map the drafter's logits hold its own ids of the stop tokens
            k: stop_ids
            if k == "t" or states[0].stop_ids_d is None
            else states[0].stop_ids_d
            for k in step_logits
        }
        step_logits = {
            k: hold_stops(x, produced, 0, cfg.min_tokens, stops[k])
            for k, x in step_logits.items()
        }
    outcome = _rule(proposer, method, cfg, step_logits, drafts, states)
    committed = cut_dead_ends(
        proposer,
        batch,
        index,
        step_logits["t"],
        outcome,
        states[0].banned_v if proposer.vmap is not None else states[0].banned,
        outcome.committed(host_drafts),
    )  # a structured output's dead end: no committable token the grammar allows
    _put_rows(out, index, committed)
    if logprobs is not None:
        # plain speculative decoding (no config: SD's rule, the verifier's greedy token) reads t
        decided = (
            (method, cfg, step_logits, outcome, n, proposer.vmap)
            if cfg is not None
            else None
        )
        logprobs.add(index, out, decided)


def _rule(proposer, method, cfg, step_logits, drafts, states):
    """The method's rule on a chunk's logits by name and drafts [G, n] -> its StepOutcome."""
    # a cross-family engine: the rules across the map (vocab_sampling.py sampled, vocab_align.py greedy: the
    # transformers loop's Plan.decide)
    if proposer.vmap is not None and cfg is not None and cfg.samples:
        return vocab_sampling.sample(
            method.name,
            cfg,
            step_logits,
            drafts,
            states[0].banned_v,
            proposer.vmap,
            [s.generator for s in states],
        )
    if proposer.vmap is not None:
        return vocab_align.decide(
            method.name, cfg, step_logits, drafts, states[0].banned_v, proposer.vmap
        )
    if cfg is not None and cfg.samples:
        return method.sample(
            cfg,
            step_logits,
            drafts,
            states[0].banned,
            [s.generator for s in states],
        )
    return method.decide(cfg, step_logits, drafts, states[0].banned)


def _put_rows(out: torch.Tensor, index: list[int], committed: list[list[int]]) -> None:
    """out[index[j], :len(committed[j])] = committed[j] for a group's rows, in one host tensor and one copy
    (rows shorter than the group's longest keep PLACEHOLDER past their tokens)."""
    width = max(len(c) for c in committed)
    block = torch.tensor(
        [c + [PLACEHOLDER] * (width - len(c)) for c in committed], dtype=torch.int32
    )  # [G, w]
    out[torch.tensor(index), :width] = block


def _logits(
    method, proposer, batch, logits, logits_indices, first, index, drafts, cfg
) -> dict[str, torch.Tensor]:
    """The logits the method's rule reads, for the rows `index` with their drafts [G, n]: t, b [G, n+1, V];
    a [G, n or n+1, V]; for sampled sd and scd the x_comp drafting logits the drafts were drawn from
    ("sd", DRAFTED: [G, n, V], draft_pick.py keeps them), read from the proposer by name (step_logits). A test
    recording wraps this function while it is on."""
    n, req_ids = drafts.shape[1], [batch.req_ids[i] for i in index]
    out = {"t": torch.stack([logits[first[i] : first[i] + n + 1] for i in index])}
    if "b" in method.reads:
        token_index = torch.cat(
            [logits_indices[first[i] : first[i] + n + 1] for i in index]
        )
        out["b"] = proposer.step_logits("b", req_ids, n + 1, token_index, drafts)
    if "a" in method.reads:
        stored = proposer.row(
            req_ids[0]
        ).request.num_draft_logits  # a_1..a_K (and a_{K+1})
        out["a"] = proposer.step_logits("a", req_ids, min(n + 1, stored))
    if (
        cfg is not None and cfg.samples and n and method.draft_view == "x_comp"
    ):  # q: what the drafts were drawn from
        name = (
            method.drafting.logits
            if method.drafting.logits not in method.reads
            else DRAFTED
        )
        out[name] = proposer.step_logits(name, req_ids, n)  # [G, n, V]
    return out


def _refuse_sampling(proposer, req_id, state) -> bool:
    """Sampling requests go to vLLM's own (rejection) sampler, which needs the GPU build; on the CPU
    build the request fails alone (and this step decodes it greedily)."""
    if not is_cpu_build():
        return False
    proposer.fail(
        req_id,
        state,
        RequestArgsError(
            "speculative decoding on the CPU build decodes greedily only: use temperature=0 and no penalties, "
            "logit_bias, bad_words, allowed_token_ids or min_tokens (logprobs are served)"
        ),
    )
    return True


def _stock(rows, out, logits, spec_meta, stock_sample) -> None:
    """vLLM's own sampler for `rows` (plain rows that sample). It processes float32 logits in place (its
    `.to(float32)` is then no copy, and temperature divides in place: v1/sample/sampler.py), and `_logprobs`
    reads the raw scores after it: a float32 engine's logits go to it as a copy (a bf16 one's are copied by it)."""
    given = logits.clone() if logits.dtype == torch.float32 else logits
    sampled = stock_sample(given, spec_meta).sampled_token_ids.to("cpu", torch.int32)
    for i in rows:
        out[i, : sampled.shape[1]] = sampled[i]
