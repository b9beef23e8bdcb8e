"""The permuted-verifier oracle on a real vocabulary (issue 43), transformers backend: the real-shape Qwen3 pair
(a Qwen3-VL drafter and a Qwen3 verifier carrying Qwen's real tokenizer, 151,936 rows; conftest.py's real_shapes)
and the same pair with the verifier's 151,669 token ids permuted (xfamily_models.permuted_real_qwen3: same strings,
embedding and output rows permuted alike), a cross-family pair whose map is known, give exactly the same answers
under the permutation, traces and statistics, every method greedy, AsymSpec seeded sampled too."""

import pytest
from helpers import random_request
from xfamily_models import permuted_real_qwen3

from asymspec_vl import AsymSpecConfig, AsymSpecVL

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]
METHODS = ("asymspec", "sd", "scd", "floor", "drafter")
CFG = AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=8)
HOT = AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=8, temperature=0.9, seed=4)
# the method also run sampled (seeded; CI time: the others sampled in tests/backends/vllm/test_real_permuted.py)
SAMPLED = ("asymspec",)


def without_time(stats) -> dict:
    return {
        k: v
        for k, v in stats.to_dict().items()
        if k not in ("elapsed_s", "tokens_per_s")
    }


def test_the_permuted_real_qwen3_verifier_gives_exactly_the_same_run(real_shapes):
    drafter, verifier = real_shapes.pair("real-qwen3")
    folder, new_of = permuted_real_qwen3(real_shapes)
    one = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(verifier), device="cpu", dtype="float32"
    )
    two = AsymSpecVL.from_pretrained(
        drafter=str(drafter), verifier=str(folder), device="cpu", dtype="float32"
    )
    assert one.pair.vmap.identity and not two.pair.vmap.identity
    m = two.pair.vmap
    assert (m.drafter_size, m.verifier_size) == (151936, 151669)
    # every string of the verifier's tokenizer shared, under other ids
    assert m.size == len(two.pair.tokenizer) == 151669
    # one request (CI time; batched on vLLM: tests/backends/vllm/test_real_permuted.py)
    reqs = [random_request(1)]
    accepted = 0
    for method in METHODS:
        for cfg in (CFG, HOT) if method in SAMPLED else (CFG,):
            xs = one.generate_batch(reqs, method, cfg)
            ys = two.generate_batch(reqs, method, cfg)
            for x, y in zip(xs, ys):
                assert y.token_ids == [new_of[i] for i in x.token_ids], (method, cfg)
                assert y.text == x.text
                assert [t.source for t in y.trace] == [t.source for t in x.trace]
                assert without_time(y.stats) == without_time(x.stats)
                accepted += x.stats.accepted
    assert (
        accepted > 0
    )  # the gate accepted drafts: accepted and fused tokens were compared
