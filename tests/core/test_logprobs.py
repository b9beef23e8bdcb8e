"""Token logprobs on the transformers loop: each emitted token's logprob under the distribution it was chosen from,
checked against the models' logits recomputed from scratch (a forward over prompt + answer, no cache)."""

import math

import pytest
import torch
from helpers import random_request

from asymspec_vl import AsymSpecConfig
from asymspec_vl.backends.hf.reference import logits_after
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.gate import context_delta, fuse, scd_scores
from asymspec_vl.core.logprobs import distribution
from asymspec_vl.core.methods import NAMES
from asymspec_vl.inputs.prompts import encode_request

TOL = 1e-4
CFG = AsymSpecConfig(K=2, gamma=0.3, max_new_tokens=10, ignore_eos=True, logprobs=3)


def run(vl, method, cfg=CFG, seed=3):
    return vl.generate_batch([random_request(seed)], method, cfg)[0]


def recomputed(vl, seed, model, view, answer):
    """log-softmax of `model`'s logits at each answer position, from one uncached forward. -> [len(answer), V]"""
    pair = vl.pair
    enc = encode_request(random_request(seed), pair.processor, pair.tokenizer)
    ids = answer[:-1]
    return logits_after(model, enc.view(view), ids, len(answer)).float()


def check_values(res, scores_at):
    """Every token's logprob and top list equal log-softmax of the scores it names, recomputed."""
    assert res.logprobs is not None and len(res.logprobs) == len(res.token_ids) > 0
    for j, (tok, lp) in enumerate(zip(res.token_ids, res.logprobs)):
        expected = scores_at(lp.distribution, j).log_softmax(-1)
        assert lp.token_id == tok and abs(lp.logprob - float(expected[tok])) < TOL, (
            j,
            lp.distribution,
        )
        top = expected.topk(3)
        assert [i for i, _ in lp.top] == top.indices.tolist()
        assert all(
            v == w or abs(v - w) < TOL for (_, v), w in zip(lp.top, top.values.tolist())
        )  # -inf: SCD
        assert math.exp(lp.logprob) <= 1.0 and all(v <= lp.top[0][1] for _, v in lp.top)


def test_floor_logprobs_are_the_verifiers_log_softmax(tiny_vl):
    res = run(tiny_vl, "floor")
    t = recomputed(tiny_vl, 3, tiny_vl.backend.verifier, "x_comp", res.token_ids)
    check_values(res, lambda name, j: {"t": t[j]}[name])
    assert {lp.distribution for lp in res.logprobs} == {"t"}
    # greedy: the emitted token is the most probable, first in its top list
    assert all(lp.top[0][0] == lp.token_id for lp in res.logprobs)


def test_drafter_alone_logprobs_are_q(tiny_vl):
    res = run(tiny_vl, "drafter")
    q = recomputed(tiny_vl, 3, tiny_vl.backend.drafter, "x_question", res.token_ids)
    check_values(res, lambda name, j: {"q": q[j]}[name])


@pytest.mark.parametrize("bonus", ["verifier", "fused"])
def test_asymspec_logprobs_follow_each_tokens_source(tiny_vl, bonus):
    """An accepted draft: the drafter's a on x_full; the fused token: t + beta * delta; the bonus: t (or fused)."""
    cfg = CFG.replace(
        bonus=bonus, gamma=0.02
    )  # a low gamma: drafts accepted, fused and bonus tokens alike
    found = set()
    for seed in (3, 4):
        res = run(tiny_vl, "asymspec", cfg, seed)
        be = tiny_vl.backend
        a = recomputed(tiny_vl, seed, be.drafter, "x_full", res.token_ids)
        b = recomputed(tiny_vl, seed, be.drafter, "x_comp", res.token_ids)
        t = recomputed(tiny_vl, seed, be.verifier, "x_comp", res.token_ids)
        fused = fuse(t, context_delta(a, b, t, cfg.delta_source), cfg.beta)
        check_values(
            res,
            lambda name, j, a=a, t=t, fused=fused: {
                "a": a[j],
                "t": t[j],
                "fused": fused[j],
            }[name],
        )
        pairs = {(s.source, lp.distribution) for s, lp in zip(res.trace, res.logprobs)}
        assert pairs <= {
            ("draft", "a"),
            ("fused", "fused"),
            ("bonus", "fused" if bonus == "fused" else "t"),
        }
        found |= pairs
    assert {"draft", "fused", "bonus"} <= {
        s for s, _ in found
    }  # every branch was exercised


def test_sd_and_scd_logprobs(tiny_vl):
    """SD: the verifier's t for every token; SCD: its contrastive target for every token."""
    be = tiny_vl.backend
    sd = run(tiny_vl, "sd")
    t = recomputed(tiny_vl, 3, be.verifier, "x_comp", sd.token_ids)
    check_values(sd, lambda name, j: {"t": t[j]}[name])
    scd = run(tiny_vl, "scd")
    t = recomputed(tiny_vl, 3, be.verifier, "x_comp", scd.token_ids)
    b = recomputed(tiny_vl, 3, be.drafter, "x_comp", scd.token_ids)
    target = scd_scores(t, b, CFG.beta, CFG.scd_alpha)
    check_values(scd, lambda name, j: {"contrastive": target[j]}[name])
    assert {lp.distribution for lp in scd.logprobs} == {"contrastive"}


@pytest.mark.parametrize("method", NAMES)
def test_logprobs_change_no_token_and_zero_alternatives_is_the_token_alone(
    tiny_vl, method
):
    plain = run(tiny_vl, method, CFG.replace(logprobs=None))
    assert plain.logprobs is None and "logprobs" not in plain.to_dict()
    res = run(tiny_vl, method, CFG.replace(logprobs=0))
    assert res.token_ids == plain.token_ids and len(res.logprobs) == len(res.token_ids)
    assert all(lp.top == [] and lp.logprob <= 0 for lp in res.logprobs)
    assert [lp.distribution for lp in res.logprobs] == [
        distribution(method, CFG, s) for s in (x.source for x in res.trace)
    ]
    # batched rows and a sampled run carry one entry per token too
    hot = run(tiny_vl, method, CFG.replace(temperature=2.0, seed=1))
    assert len(hot.logprobs) == len(hot.token_ids)
    assert hot.to_dict()["logprobs"][0]["token_id"] == hot.token_ids[0]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_logprobs_config_is_validated(bad):
    with pytest.raises(ConfigError, match="logprobs"):
        AsymSpecConfig(logprobs=bad)
    assert (
        "logprobs" not in AsymSpecConfig().to_dict()
        and AsymSpecConfig(logprobs=2).to_dict()["logprobs"] == 2
    )


def test_a_stop_cut_step_keeps_one_logprob_per_token(tiny_vl):
    res = run(tiny_vl, "asymspec", CFG.replace(max_new_tokens=3))
    assert len(res.token_ids) == len(res.logprobs) == 3
    assert torch.tensor([lp.logprob for lp in res.logprobs]).le(0).all()


def test_prompt_logprobs_score_each_token_after_the_ones_before_it():
    """Position i's scores are token i + 1's distribution; the first token has none; rank counts the more
    probable tokens (ties share the better rank, as vLLM's `>` count does)."""
    from asymspec_vl.core.logprobs import check_prompt_logprobs, prompt_logprobs

    logits = torch.tensor(
        [[0.0, 2.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]]
    )  # [P, V], P = 3
    out = prompt_logprobs(logits, [5, 2, 0], k=2)
    assert out[0] is None and [x.token_id for x in out[1:]] == [2, 0]
    lp = logits.log_softmax(-1)
    assert out[1].logprob == pytest.approx(lp[0, 2].item()) and out[1].rank == 2
    assert [i for i, _ in out[1].top] == [1, 2] or [i for i, _ in out[1].top] == [1, 3]
    assert out[2].rank == 1 and out[2].top[0][0] == 0
    check_prompt_logprobs("floor", AsymSpecConfig(prompt_logprobs=1))
    with pytest.raises(ConfigError, match="runs no verifier"):
        check_prompt_logprobs("drafter", AsymSpecConfig(prompt_logprobs=1))
    with pytest.raises(ConfigError, match="prompt_logprobs"):
        AsymSpecConfig(prompt_logprobs=-1)
