"""The permuted-verifier oracle on a real vocabulary (issue 43), vLLM engine: the real-shape Qwen3 verifier (Qwen's
real tokenizer, 151,936 rows) with its ids permuted (xfamily_models.permuted_real_qwen3), a cross-family pair of a
known map with 151,669 shared tokens, batched on vLLM gives the transformers backend's run of the same pair (tokens,
sources, finish, step counts) and the unpermuted pair's answers under the permutation, every method greedy, AsymSpec and
the drafter alone seeded sampled too (sampled SD / SCD across a real map: tests/evals/stress/test_stress_real.py)."""

import pytest
from helpers import random_request, summary
from xfamily_models import permuted_real_qwen3

from asymspec_vl import AsymSpecConfig, AsymSpecVL

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("one_torch_thread")]
N_REQUESTS = 4


@pytest.fixture(scope="module")
def pipes(real_shapes):
    drafter, verifier = real_shapes.pair("real-qwen3")
    folder, new_of = permuted_real_qwen3(real_shapes)
    hf = dict(device="cpu", dtype="float32")
    hf_one = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(verifier), **hf
    )
    hf_two = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(folder), **hf
    )
    vllm_two = AsymSpecVL.from_pretrained(
        drafter=str(drafter),
        verifier=str(folder),
        backend="vllm",
        dtype="float32",
        block_size=16,
    )
    yield hf_one, hf_two, vllm_two, new_of
    vllm_two.backend.close()


@pytest.mark.parametrize(
    "method, cfg",
    [
        ("asymspec", AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=10)),
        ("sd", AsymSpecConfig(K=2, max_new_tokens=10)),
        ("scd", AsymSpecConfig(K=2, max_new_tokens=10)),
        ("floor", AsymSpecConfig(K=2, max_new_tokens=10)),
        ("drafter", AsymSpecConfig(K=2, max_new_tokens=10)),
        (
            "asymspec",
            AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=10, temperature=0.9, seed=4),
        ),
        ("drafter", AsymSpecConfig(K=2, max_new_tokens=10, temperature=1.5, seed=8)),
    ],
)
def test_the_permuted_real_qwen3_verifier_on_vllm_equals_transformers_batched(
    pipes, method, cfg
):
    hf_one, hf_two, vllm_two, new_of = pipes
    assert not vllm_two.pair.vmap.identity and vllm_two.pair.vmap.size == 151669
    reqs = [random_request(s) for s in range(N_REQUESTS)]
    got = vllm_two.generate_batch(reqs, method, cfg)
    assert summary(got) == summary(hf_two.generate_batch(reqs, method, cfg))
    # the oracle: the unpermuted pair's answers, moved through the permutation
    unpermuted = hf_one.generate_batch(reqs, method, cfg)
    assert [r.token_ids for r in got] == [
        [new_of[i] for i in r.token_ids] for r in unpermuted
    ]
