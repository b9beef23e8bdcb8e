"""The differential stress test on the real-shape pairs (issue 43; the long run: `python -m asymspec_vl.evals.stress
--pairs real`): tiny random models carrying the real tokenizers, vocabulary rows, special ids and chat templates
(conftest.py's real_shapes). One case on `real-llama3` (a Qwen3-VL drafter of 151,936 rows, a Llama-3 verifier of
128,256, 109,568 shared) at a real batch size: 64 requests in one engine (max_num_seqs 64, one sampler batch of 64
rows), every method the cross-family engine serves, greedy and seeded sampled, image and text-only; every request
equal to itself alone on transformers (tokens, sources, finish, step counts), t, a, b and q to 1e-4 at each
request's last verification step; and a reference answer that differs is reported as that row's mismatch."""

import pytest
from asymspec_vl.evals.stress.workload import EngineCase, RowSpec, Workload

REAL_BATCH = 64
# the methods the cross-family engine serves, in turn; every fifth row sampled (seeded: each method), every fourth
# an image
MODES = ("asymspec", "sd", "scd", "floor")
HOT = {"temperature": 0.8, "seed": 11}


def real_batch_workload(pair: str = "real-llama3") -> Workload:
    """REAL_BATCH rows arriving together on one engine of max_num_seqs REAL_BATCH (a few more arriving later, into
    the rows the first ones free), short answers (the CPU cost is the transformers side's 64 lone decodes)."""
    rows = tuple(
        RowSpec(
            MODES[i % 4],
            K=1 + i % 2,
            max_new=4 + i % 3,
            request_seed=1000 + i,
            image=i % 4 == 0,
            arrival=0 if i < REAL_BATCH else 2,
            config={**HOT, "seed": i} if i % 5 == 4 else {},
        )
        for i in range(REAL_BATCH + 2)
    )
    engine = EngineCase(
        block_size=16, K=2, max_num_seqs=REAL_BATCH, prefix_caching=True, pair=pair
    )
    return Workload(43, engine, rows)


@pytest.fixture(scope="module")
def real_paths(tiny_models, real_shapes):
    """The stress paths with the session's real-shape folder as the real-pair cache (hf_side.real_cache)."""
    return {
        **tiny_models,
        "root": tiny_models["verifier"].parent,
        "real": real_shapes.cache,
    }


@pytest.fixture(scope="module")
def llama3_reference(real_paths):
    from asymspec_vl.evals.stress.hf_side import Reference

    return Reference(real_paths, "real-llama3")


def test_the_real_pairs_are_the_fixtures_pairs_and_their_folders(
    real_paths, real_shapes
):
    """--pairs real draws REAL_PAIRS' names; a real pair's folders are the session's (real_shapes.pair)."""
    from asymspec_vl.evals.stress.hf_side import REAL, REAL_ROTATION, pair_paths

    from asymspec_vl.toy.real_vocab import REAL_PAIRS

    assert set(REAL) == set(REAL_PAIRS) and set(REAL_ROTATION) <= set(REAL)
    got = pair_paths(real_paths, "real-llama3")
    assert (got["vl_drafter"], got["verifier"]) == real_shapes.pair("real-llama3")
    assert got["root"] == real_paths["root"]


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_real_batch_of_64_on_real_llama3_equals_transformers_and_a_planted_mismatch_is_reported(
    real_paths, llama3_reference, monkeypatch
):
    from asymspec_vl.evals.stress.case import run_case

    alone = llama3_reference.alone
    w = real_batch_workload()
    first = [r for r in w.rows if r.arrival == 0]
    assert len(first) == w.engine.max_num_seqs == REAL_BATCH < len(w.rows)
    wrong = (w.rows[5], w.rows[14])  # a greedy sd row, a sampled scd row

    def one_wrong(row, enc):
        out = alone(row, enc)
        if row in wrong:
            out.token_ids = [t + 1 for t in out.token_ids]
        return out

    monkeypatch.setattr(llama3_reference, "alone", one_wrong)
    report = run_case(w, real_paths, llama3_reference, logit_steps=1)
    v = report.vocabulary
    assert (v["pair"], v["drafter"], v["verifier"], v["identity"]) == (
        "real-llama3",
        151936,
        128256,
        False,
    )
    assert v["shared"] >= 109566  # the paper's Appendix D count, plus the turn markers
    assert report.skipped == {} and report.compared == report.requests == len(w.rows)
    sampled = {r.mode for r in w.rows if "temperature" in r.config}
    assert sampled == set(MODES) and report.sampled == 13
    assert [(m.what, m.row) for m in report.mismatches] == [
        ("tokens", 5),
        ("tokens", 14),
    ], report.mismatches
    # each name a row's rule read, checked at its last step: t every row, a and b asymspec, b scd, q sampled sd / scd
    assert report.logit_steps >= len(w.rows)
    for name in ("a", "b", "q", "t"):
        assert 0 < report.max_error[name] < 1e-4, (name, report.max_error)
