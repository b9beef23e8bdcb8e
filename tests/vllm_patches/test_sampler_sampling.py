"""The asymspec engine's sampler and draft pick at temperature > 0, on stand-ins: each calls the one sampled
rule of asymspec_vl.core.sampling with the request's own generator, SD and SCD against the exact q the drafts
were drawn from (kept by the pick), and min_tokens holds the stop tokens in every logits the step reads."""

import dataclasses
import types

import torch

from asymspec_vl.core import sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from vllm_patches import sampler
from vllm_patches.drafter import draft_pick
from vllm_patches.drafter.draft_logits import DraftLogits
from vllm_patches.drafter.proposer import AsymSpecProposer
from vllm_patches.requests.request_args import AsymSpecRequest
from vllm_patches.requests.rows import RowState

V, K = 6, 2
HOT = AsymSpecConfig(K=K, temperature=1.0, seed=4)


def row(mode, cfg, req_id, stop_ids=()):
    request = AsymSpecRequest(METHODS[mode], cfg, stop_ids=stop_ids)
    gen = sampling.generators(cfg, 1, "cpu")[0] if cfg.samples else None
    return RowState(
        request,
        cfg.K,
        banned=torch.zeros(V, dtype=torch.bool),
        req_id=req_id,
        generator=gen,
    )


def stand_in(states, b, q, t, outputs):
    """The proposer and step batch the sampler reads: the proposer holds `states` (req_id -> RowState), b [N, V]
    at the step's token indices and the stored drafting logits q (req_id -> [K, V]); t [N, V] the verifier's
    logits; outputs: req_id -> y."""
    store = DraftLogits(4, K, V, torch.float32, "cpu")
    for req_id, x in q.items():
        store.store(req_id, x)
    proposer = types.SimpleNamespace(
        row=states.__getitem__,
        comp=types.SimpleNamespace(logits=lambda i: b[i]),
        full=types.SimpleNamespace(logits=store.gather, draft_logits=store),
        vmap=None,  # one vocabulary
    )
    proposer.step_logits = types.MethodType(AsymSpecProposer.step_logits, proposer)
    batch = sampler.StepBatch(
        list(states), [outputs[r] for r in states], [None] * len(states), {}, None
    )
    return proposer, batch


def test_scd_samples_against_the_drafting_q_not_the_scored_b():
    """b (the x_comp scoring pass) and q (the drafting pass) differ here on purpose: the sampler's token is
    sample_scd's with q, and differs from the one with b, so lossless sampling reads the drafts' own q."""
    torch.manual_seed(0)
    t, b, q = (
        torch.randn(K + 1, V) * 3,
        torch.randn(K + 1, V) * 3,
        torch.randn(K, V) * 3,
    )
    drafts = torch.tensor([[1, 4]])
    seen = {}
    for seed in range(40):
        cfg = HOT.replace(seed=seed)
        proposer, batch = stand_in(
            {"r": row("scd", cfg, "r")}, b, {"r": q}, t, {"r": [7, 8]}
        )
        meta = types.SimpleNamespace(num_draft_tokens=[K], draft_token_ids=drafts[0])
        got = (
            sampler.sample(proposer, batch, t, meta, torch.arange(K + 1), None, None)
            .sampled_token_ids[0]
            .tolist()
        )
        want_q = sampling.sample_scd(
            b[None],
            t[None],
            drafts,
            cfg,
            sampling.generators(cfg, 1, "cpu"),
            None,
            q[None],
        )
        want_b = sampling.sample_scd(
            b[None], t[None], drafts, cfg, sampling.generators(cfg, 1, "cpu")
        )
        committed_q, committed_b = (
            want_q.committed(drafts)[0],
            want_b.committed(drafts)[0],
        )
        assert [x for x in got if x >= 0] == committed_q
        seen[seed] = committed_q != committed_b
    assert any(seen.values())  # q matters: the test could fail with b in its place


def test_sd_samples_with_q_and_min_tokens_holds_every_logits():
    """SD's rule reads the stored q as "sd"; below min_tokens the stop token is -inf in t and q (y has 1 token,
    min_tokens 3: output positions 1, 2 held, 3 not)."""
    torch.manual_seed(1)
    t, q = torch.randn(K + 1, V), torch.randn(K, V)
    t[:, 5] = 50.0  # the verifier's stop token 5 would win at every position
    drafts = torch.tensor([[2, 3]])
    cfg = HOT.replace(min_tokens=3, max_new_tokens=8)
    proposer, batch = stand_in(
        {"r": row("sd", cfg, "r", stop_ids=(5,))}, t, {"r": q}, t, {"r": [7]}
    )
    meta = types.SimpleNamespace(num_draft_tokens=[K], draft_token_ids=drafts[0])
    got = (
        sampler.sample(proposer, batch, t, meta, torch.arange(K + 1), None, None)
        .sampled_token_ids[0]
        .tolist()
    )
    held_t, held_q = t.clone(), q.clone()
    held_t[:2, 5] = held_q[:2, 5] = float("-inf")
    want = sampling.sample_sd(
        held_t[None], held_q[None], drafts, cfg, sampling.generators(cfg, 1, "cpu")
    )
    assert [x for x in got if x >= 0] == want.committed(drafts)[0]
    assert 5 not in want.committed(drafts)[0][:2]


def test_the_pick_keeps_greedy_rows_exact_and_draws_sampling_rows_with_their_generator():
    torch.manual_seed(2)
    logits = torch.randn(3, V) * 2
    banned = torch.zeros(3, V, dtype=torch.bool)
    banned[:, 0] = True
    greedy_cfg = AsymSpecConfig(K=K)
    states = [
        row("sd", greedy_cfg, "g"),
        row("sd", HOT, "s"),
        row("sd", greedy_cfg, "h", stop_ids=(3,)),
    ]
    states[2] = dataclasses.replace(
        states[2],
        request=dataclasses.replace(
            states[2].request, cfg=greedy_cfg.replace(min_tokens=1)
        ),
    )
    store = DraftLogits(4, K, V, torch.float32, "cpu")
    got = draft_pick.pick(logits, states, 0, banned, store)
    held = logits[2].clone()
    held[3] = float("-inf")
    want_s = sampling.draw(
        sampling.filtered_logprobs(logits[1][None], HOT, banned[1]),
        sampling.generators(HOT, 1, "cpu"),
    )[0]
    assert got.tolist() == [
        int(logits[0].masked_fill(banned[0], -1e9).argmax()),
        int(want_s),
        int(held.masked_fill(banned[2], -1e9).argmax()),
    ]
    assert (
        torch.equal(store.gather(["s"], 1)[0, 0], logits[1]) and "g" not in store.slots
    )  # q of the sampled row
    before = states[1].generator.get_state()
    draft_pick.pick(
        logits, states, K, banned
    )  # a pass past the row's K drafts (a_{K+1}) draws nothing
    assert torch.equal(states[1].generator.get_state(), before)
