"""A Mistral-vocabulary verifier ends its answers on vLLM (inputs/vocab_map.py's answer end read from its template):
a Qwen3-VL drafter with a Tekken verifier (the real tokenizer and rows) whose every position ends with </s>
finishes by "stop" after min_tokens, batched, greedy and sampled, with the transformers backend's tokens (before
issue 43 </s> was outside the shared set: every answer ran to its budget)."""

import pytest
from ending_verifier import write_ending_verifier
from helpers import random_request, summary

from asymspec_vl import AsymSpecConfig, AsymSpecVL

pytestmark = pytest.mark.vllm
HOLD = 3  # min_tokens: the answer's words before its end


@pytest.fixture(scope="module")
def pipes(real_shapes, tmp_path_factory):
    verifier = write_ending_verifier(
        real_shapes.model_dir("mistral-tekken", "verifier", 1),
        tmp_path_factory.mktemp("ending") / "tekken",
        2,
    )
    drafter = str(real_shapes.model_dir("qwen3", "drafter"))
    hf = AsymSpecVL.from_pretrained(
        drafter=drafter, verifier=str(verifier), device="cpu"
    )
    vllm = AsymSpecVL.from_pretrained(
        drafter=drafter, verifier=str(verifier), backend="vllm", block_size=16
    )
    yield hf, vllm
    vllm.backend.close()


@pytest.mark.parametrize(
    "method, cfg",
    [
        ("asymspec", AsymSpecConfig(K=2, max_new_tokens=12, min_tokens=HOLD)),
        ("sd", AsymSpecConfig(K=2, max_new_tokens=12, min_tokens=HOLD)),
        (
            "floor",
            AsymSpecConfig(
                K=2, max_new_tokens=12, min_tokens=HOLD, temperature=0.8, seed=1
            ),
        ),
        (
            "asymspec",
            AsymSpecConfig(
                K=2, max_new_tokens=12, min_tokens=HOLD, temperature=0.8, seed=2
            ),
        ),
    ],
)
def test_a_mistral_verifier_ends_its_answer_on_vllm(pipes, method, cfg):
    hf, vllm = pipes
    assert vllm.pair.vmap.specials["answer_end"] == (151645, 2)
    reqs = [random_request(s) for s in range(3)]
    got = vllm.generate_batch(reqs, method, cfg)
    for r in got:
        assert (r.finish_reason, len(r.token_ids), r.token_ids[-1]) == (
            "stop",
            HOLD + 1,
            2,
        )
    assert summary(got) == summary(hf.generate_batch(reqs, method, cfg))
