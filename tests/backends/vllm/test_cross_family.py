"""Cross-family pairs on the vLLM engine (docs/cross-family.md, "vLLM engine"):
- the embedded cross-family pair (`embedded-llama`: two tokenizers, 426 and 276 logits, the drafter's x_comp in its
  own template, of another length than the verifier's) batched on vLLM gives exactly the transformers backend's
  answers, traces and statistics, every method the engine runs;
- the permuted-verifier oracle (a verifier whose ids are permuted: same strings, embedding and output rows permuted
  alike) on vLLM gives the transformers backend's run of the same pair, and the unpermuted pair's answers under
  the permutation, with logprobs;
- min_tokens across the map holds each model's own ids of the stop tokens;
- seeded sampling across the map (asymspec, sd, scd: every draw over the shared set in drafter-id order) gives the
  transformers backend's tokens and traces, batched, and the permuted verifier's oracle holds under it;
- what is not ported (Floor's and the drafter's sampling on their plain engines, ...) is refused with a typed
  error."""

import pytest
from asymspec_vl.evals.toy.eval import VARIANTS, request_of
from helpers import random_request, summary
from xfamily_models import write_other_vocabulary

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.core.errors import ConfigError, ModelPairError
from asymspec_vl.inputs.conversation import encode
from asymspec_vl.toy import world

pytestmark = pytest.mark.vllm

N_REQUESTS = 6


@pytest.fixture(scope="module")
def permuted(tiny_models, tmp_path_factory):
    return write_other_vocabulary(
        tiny_models["verifier"], tmp_path_factory.mktemp("perm"), seed=5
    )


@pytest.fixture(scope="module")
def pipes(tiny_models, permuted):
    folder, _ = permuted
    hf_one = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        device="cpu",
    )
    hf_two = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(folder), device="cpu"
    )
    vllm_two = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(folder),
        backend="vllm",
        block_size=16,
    )
    yield hf_one, hf_two, vllm_two
    vllm_two.backend.close()


@pytest.mark.parametrize(
    "method, cfg",
    [
        ("asymspec", AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=16)),
        (
            "asymspec",
            AsymSpecConfig(
                K=2, bonus="fused", gate="lambda", beta=0.5, max_new_tokens=16
            ),
        ),
        ("sd", AsymSpecConfig(K=2, max_new_tokens=16)),
        ("scd", AsymSpecConfig(K=2, max_new_tokens=16)),
        ("floor", AsymSpecConfig(K=2, max_new_tokens=16)),
        (
            "asymspec",
            AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=16, temperature=0.9, seed=4),
        ),
    ],
)
def test_permuted_verifier_on_vllm_equals_transformers_batched(
    pipes, permuted, method, cfg
):
    hf_one, hf_two, vllm_two = pipes
    _, new_of = permuted
    assert not vllm_two.pair.vmap.identity
    reqs = [random_request(s) for s in range(N_REQUESTS)]
    expected = hf_two.generate_batch(reqs, method, cfg)
    got = vllm_two.generate_batch(reqs, method, cfg)
    assert summary(got) == summary(expected)
    # the oracle: the unpermuted pair's answers, moved through the permutation
    unpermuted = hf_one.generate_batch(reqs, method, cfg)
    assert [r.token_ids for r in got] == [
        [new_of[i] for i in r.token_ids] for r in unpermuted
    ]
    if method == "asymspec":
        sources = {s for row in summary(got) for s in row[1]}
        assert {"draft", "fused"} <= sources  # both gate outcomes were exercised


def test_logprobs_across_the_map_equal_transformers(pipes):
    _, hf_two, vllm_two = pipes
    cfg = AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=8, logprobs=2)
    reqs = [random_request(s) for s in range(2)]
    for x, y in zip(
        hf_two.generate_batch(reqs, "asymspec", cfg),
        vllm_two.generate_batch(reqs, "asymspec", cfg),
    ):
        assert y.token_ids == x.token_ids
        for a, b in zip(x.logprobs, y.logprobs):
            assert (a.token_id, a.distribution) == (b.token_id, b.distribution)
            assert b.logprob == pytest.approx(a.logprob, abs=1e-4)


@pytest.mark.parametrize(
    "method, cfg, error",
    [
        ("floor", AsymSpecConfig(K=2, temperature=0.7, seed=1), ConfigError),
        ("drafter", AsymSpecConfig(K=2, temperature=0.7, seed=1), ConfigError),
        ("drafter", AsymSpecConfig(K=2, logprobs=1), ModelPairError),
    ],
)
def test_what_is_not_ported_is_refused_by_type(pipes, method, cfg, error):
    _, _, vllm_two = pipes
    with pytest.raises(error, match="cross-family"):
        vllm_two.generate_batch([random_request(0)], method, cfg)


@pytest.fixture(scope="module")
def llama_pipes():
    hf = AsymSpecVL.from_pretrained(
        verifier="embedded-llama", device="cpu", backend="hf"
    )
    vl = AsymSpecVL.from_pretrained(
        verifier="embedded-llama", backend="vllm", block_size=16
    )
    yield hf, vl
    vl.backend.close()


@pytest.mark.parametrize(
    "key",
    [
        "asymspec-K2-b1",
        "asymspec-K4-b0",
        "asymspec-K2-b1-fused",
        "sd",
        "scd",
        "floor",
        "drafter",
    ],
)
def test_embedded_llama_on_vllm_equals_transformers_batched(llama_pipes, key):
    hf, vl = llama_pipes
    vmap = vl.pair.vmap
    assert vmap.drafter_size != vmap.verifier_size  # two logit counts
    reqs = [request_of(e) for e in world.heldout(12)]
    pair = vl.pair
    encoded = [encode(r, pair.processor, pair.tokenizer, pair.cross_map) for r in reqs]
    assert any(
        len(e.drafter_comp.ids) != len(e.comp.ids) for e in encoded
    )  # the drafter's x_comp in its own template: its own KV view on vLLM
    variant = VARIANTS[key]
    expected = hf.generate_batch(reqs, variant.method, variant.config())
    got = vl.generate_batch(reqs, variant.method, variant.config())
    assert summary(got) == summary(expected)
    shared = set(vmap.verifier_ids.tolist())
    assert all(set(r.token_ids) <= shared for r in got)
    if key.startswith("asymspec"):
        assert sum(r.stats.accepted for r in got) > 0


@pytest.mark.parametrize("key", ["asymspec-K2-b1", "scd"])
def test_embedded_llama_min_tokens_on_vllm_equals_transformers(llama_pipes, key):
    """min_tokens across the map: the stop tokens held in t in the verifier's ids and in the drafter's logits (its
    drafts, a, b) in the drafter's."""
    hf, vl = llama_pipes
    reqs = [request_of(e) for e in world.heldout(6)]
    variant = VARIANTS[key]
    free = hf.generate_batch(reqs, variant.method, variant.config())
    longest = max(len(r.token_ids) for r in free)
    cfg = variant.config().replace(min_tokens=longest + 2)
    expected = hf.generate_batch(reqs, variant.method, cfg)
    assert all(len(r.token_ids) >= longest + 2 for r in expected)  # the hold mattered
    assert summary(vl.generate_batch(reqs, variant.method, cfg)) == summary(expected)


HOT = {"temperature": 1.5, "seed": 7}


@pytest.mark.parametrize(
    "key, changes",
    [
        ("asymspec-K2-b1", HOT),
        ("asymspec-K2-b1-fused", {**HOT, "top_k": 40, "top_p": 0.98}),
        ("sd", HOT),
        ("scd", {**HOT, "min_p": 0.02}),
    ],
)
def test_embedded_llama_sampled_on_vllm_equals_transformers_batched(
    llama_pipes, key, changes
):
    """Seeded sampling across the map: the drafts drawn over the shared set in drafter-id order by each request's
    generator, then the method's sampled rule (core/vocab_sampling.py) with the same generator."""
    hf, vl = llama_pipes
    reqs = [request_of(e) for e in world.heldout(8)]
    variant = VARIANTS[key]
    cfg = variant.config().replace(**changes)
    expected = hf.generate_batch(reqs, variant.method, cfg)
    got = vl.generate_batch(reqs, variant.method, cfg)
    assert summary(got) == summary(expected)
    greedy = hf.generate_batch(reqs, variant.method, variant.config())
    assert [r.token_ids for r in got] != [r.token_ids for r in greedy]  # it sampled
    assert (
        sum(r.stats.accepted for r in got) > 0
    )  # the drafts were drawn, and some accepted
