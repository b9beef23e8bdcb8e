"""Logprobs on the vLLM backend equal the transformers backend's (tiny models, CPU build): Floor's from vLLM's own
sampler, AsymSpec's from the patched sampler (each token under the distribution it was chosen from)."""

import pytest

from helpers import random_request

pytestmark = pytest.mark.vllm

TOL = 2e-3  # float32 on two stacks (vLLM's CPU attention against transformers' SDPA)


@pytest.fixture(scope="module")
def vl(tiny_models):
    from asymspec_vl import AsymSpecVL

    pipe = AsymSpecVL.from_pretrained(drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"]),
                                      backend="vllm", block_size=16)
    yield pipe
    pipe.backend.close()


@pytest.mark.parametrize("method", ["floor", "asymspec"])
def test_vllm_logprobs_equal_the_transformers_backends(vl, tiny_vl, method):
    from asymspec_vl import AsymSpecConfig

    cfg = AsymSpecConfig(K=2, gamma=0.3, max_new_tokens=10, ignore_eos=True, logprobs=3)
    distributions = set()
    for seed in (3, 4):
        r = random_request(seed)
        want = tiny_vl.generate_batch([r], method, cfg)[0]
        got = vl.generate_batch([r], method, cfg)[0]
        assert got.token_ids == want.token_ids and len(got.logprobs) == len(got.token_ids)
        for g, w in zip(got.logprobs, want.logprobs):
            assert (g.token_id, g.distribution) == (w.token_id, w.distribution)
            assert g.logprob == pytest.approx(w.logprob, abs=TOL)
            assert [i for i, _ in g.top] == [i for i, _ in w.top]
            assert [v for _, v in g.top] == pytest.approx([v for _, v in w.top], abs=TOL)
            distributions.add(g.distribution)
    assert distributions == {"t"} if method == "floor" else {"a", "fused"} <= distributions
