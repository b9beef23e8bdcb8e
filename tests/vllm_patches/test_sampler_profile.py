"""vllm_patches.sampler_profile: the dummy step vLLM's profile runs decides every dummy row of each profiled rule
(a token each, logprobs for every position) with rows of its own (fresh states, one generator each, drafts a rule
may read: across a map shared verifier ids) and the worst config (every filter, min_tokens held)."""

import pytest
import torch
from asymspec_vl.evals.benchmarks.bench_vocab_map import random_map
from vllm.v1.sample.sampler import Sampler

from vllm_patches import sampler_profile

K, V, VV = 2, 60, 50


def test_the_dummy_rows_ask_the_most_and_own_their_state():
    cfg = sampler_profile.worst_config(K, True, 5)
    assert cfg.samples and cfg.top_p < 1 and cfg.top_k and cfg.min_p > 0
    assert cfg.min_tokens > K + 1 and cfg.logprobs == 5  # every position held
    assert not sampler_profile.worst_config(K, False, None).samples
    rows = sampler_profile.dummy_rows("asymspec", cfg, 3, VV, V, "cpu")
    assert list(rows) == [f"asymspec-profile-{i}" for i in range(3)]
    gens = [s.generator for s in rows.values()]
    assert len({id(g) for g in gens}) == 3 and all(g is not None for g in gens)
    vmap = random_map(V, VV, 30, seed=0)
    drafts = sampler_profile.dummy_drafts(4, K, VV, "cpu", vmap)
    assert torch.isin(drafts, vmap.verifier_ids).all()


@pytest.mark.parametrize("family", ["one vocabulary", "across a map"])
def test_each_profiled_rule_decides_every_dummy_row(family):
    vmap = random_map(V, VV, 30, seed=0) if family == "across a map" else None
    vocab_v = VV if vmap is not None else V
    rows = 4
    for method, samples, bonus in sampler_profile.PROFILED:
        logits = torch.randn(rows * (K + 1), vocab_v)
        out = sampler_profile.dummy_step(
            method,
            samples,
            logits,
            K,
            V,
            torch.float32,
            Sampler("raw_logprobs"),
            3,
            vmap,
            bonus,
        )
        tokens = out.sampled_token_ids
        assert tokens.shape == (rows, K + 1) and (tokens[:, 0] >= 0).all(), method
        assert (tokens < vocab_v).all()
        assert out.logprobs_tensors.logprobs.shape == (rows * (K + 1), 4)
