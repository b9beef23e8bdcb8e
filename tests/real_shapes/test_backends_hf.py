"""The permuted-verifier oracle at real scale on the transformers backend: the real Qwen3 verifier (151,936 rows)
with its 151,643 BPE ids permuted (same strings; embedding and output rows permuted alike, tests/xfamily_models.py)
beside the real Qwen3-VL drafter runs across a 151,669-token vocabulary map, and must answer exactly as the
one-vocabulary pair real-qwen3, under the permutation: every method greedy, AsymSpec seeded sampling too, batched."""

import pytest
from helpers import random_request, summary
from xfamily_models import write_other_vocabulary

from asymspec_vl import AsymSpecConfig, AsymSpecVL

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]
GREEDY = AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=6)
SAMPLED = GREEDY.replace(temperature=1.0, top_p=0.95, seed=5)


@pytest.fixture(scope="module")
def pipes(real_shapes, tmp_path_factory):
    drafter, verifier = (str(p) for p in real_shapes.pair("real-qwen3"))
    folder, new_of = write_other_vocabulary(
        verifier, tmp_path_factory.mktemp("real-perm"), seed=3
    )
    one = AsymSpecVL.from_pretrained(drafter=drafter, verifier=verifier, device="cpu")
    two = AsymSpecVL.from_pretrained(
        drafter=drafter, verifier=str(folder), device="cpu"
    )
    return one, two, new_of


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd", "floor", "drafter"])
def test_a_permuted_real_verifier_answers_as_the_one_vocabulary_pair(pipes, method):
    one, two, new_of = pipes
    assert one.pair.vmap.identity and not two.pair.vmap.identity
    assert two.pair.vmap.size == 151669  # every string shared, under other ids
    reqs = [random_request(s) for s in range(4)]
    for cfg in (GREEDY, SAMPLED) if method == "asymspec" else (GREEDY,):
        want = one.generate_batch(reqs, method, cfg)
        got = two.generate_batch(reqs, method, cfg)
        assert [r.token_ids for r in got] == [
            [new_of[i] for i in r.token_ids] for r in want
        ]
        assert [row[1:] for row in summary(got)] == [row[1:] for row in summary(want)]
        assert [r.text for r in got] == [r.text for r in want]
