"""The toy table's numbers are the same through the vLLM backend as through transformers: token-identical
responses for every variant of `eval toy` on a held-out sample (engines start once per module)."""

import pytest
from asymspec_vl.evals.toy.eval import VARIANTS, request_of

from asymspec_vl.toy import world

pytestmark = pytest.mark.vllm

N = 12


@pytest.fixture(scope="module")
def pipes():
    from asymspec_vl import AsymSpecVL

    hf = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", backend="vllm", dtype="float32"
    )
    yield hf, vl
    vl.backend.close()


@pytest.mark.parametrize("key", list(VARIANTS))
def test_vllm_tokens_equal_transformers(pipes, key):
    hf, vl = pipes
    v = VARIANTS[key]
    reqs = [request_of(e) for e in world.heldout(N)]
    expected = hf.generate_batch(reqs, v.method, v.config())
    got = vl.generate_batch(reqs, v.method, v.config())
    assert [r.token_ids for r in got] == [r.token_ids for r in expected]
    assert [[t.source for t in r.trace] for r in got] == [
        [t.source for t in r.trace] for r in expected
    ]
    assert [(r.stats.steps, r.stats.accepted) for r in got] == [
        (r.stats.steps, r.stats.accepted) for r in expected
    ]
