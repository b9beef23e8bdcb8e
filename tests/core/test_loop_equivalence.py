"""The cached, batched decoding loop produces exactly the tokens of Algorithm 1 recomputed from scratch."""

import pytest
from helpers import random_request

from asymspec_vl import AsymSpecConfig
from asymspec_vl.backends.hf.reference import reference_asymspec
from asymspec_vl.inputs.prompts import encode_request

PAIRS = 20
MAX_NEW = 12
SETTINGS = [
    (1, "verifier", PAIRS),
    (2, "verifier", PAIRS),
    (4, "verifier", PAIRS),
    (2, "fused", 8),
]


@pytest.fixture(scope="module")
def requests_and_refs(tiny_vl):
    """20 image + question pairs and, per (K, bonus), the from-scratch reference tokens of each."""
    reqs = [random_request(i) for i in range(PAIRS)]
    pair, be = tiny_vl.pair, tiny_vl.backend
    refs = {}
    for K, bonus, n in SETTINGS:
        cfg = AsymSpecConfig(K=K, gamma=0.3, bonus=bonus, max_new_tokens=MAX_NEW)
        refs[(K, bonus)] = (cfg, [])
        for r in reqs[:n]:
            enc = encode_request(r, pair.processor, pair.tokenizer)
            refs[(K, bonus)][1].append(
                reference_asymspec(
                    be.drafter,
                    be.verifier,
                    enc.full,
                    enc.comp,
                    cfg,
                    pair.banned_mask(be.device),
                    pair.stop_ids(cfg),
                    MAX_NEW,
                )
            )
    return reqs, refs


@pytest.mark.parametrize("K, bonus, n", SETTINGS)
def test_cached_loop_equals_from_scratch(tiny_vl, requests_and_refs, K, bonus, n):
    reqs, refs = requests_and_refs
    cfg, expected = refs[(K, bonus)]
    batch1 = [tiny_vl.generate_batch([r], config=cfg)[0].token_ids for r in reqs[:n]]
    assert batch1 == expected
    batch4 = []
    for i in range(0, n, 4):
        batch4 += [
            res.token_ids for res in tiny_vl.generate_batch(reqs[i : i + 4], config=cfg)
        ]
    assert batch4 == expected


def test_the_equivalence_exercises_both_branches(tiny_vl, requests_and_refs):
    """The comparison above is only meaningful if drafts were both accepted and fused."""
    reqs, refs = requests_and_refs
    res = tiny_vl.generate_batch(reqs[:8], config=refs[(2, "verifier")][0])
    sources = {s for r in res for s in (t.source for t in r.trace)}
    assert {"draft", "fused"} <= sources
    assert (
        0.05
        < sum(r.stats.accepted for r in res) / sum(r.stats.drafted for r in res)
        < 0.95
    )
