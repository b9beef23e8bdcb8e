"""Cross-family pairs on the vLLM engine (docs/cross-family.md, "vLLM engine"):
- the embedded cross-family pair (`embedded-llama`: two tokenizers, 426 and 276 logits, the drafter's x_comp in its
  own template, of another length than the verifier's) batched on vLLM gives exactly the transformers backend's
  answers, traces and statistics, every method the engine runs;
- the permuted-verifier oracle (a verifier whose ids are permuted: same strings, embedding and output rows permuted
  alike) on vLLM gives the transformers backend's run of the same pair, and the unpermuted pair's answers under
  the permutation, with logprobs;
- min_tokens across the map holds each model's own ids of the stop tokens;
- seeded sampling across the map (every method: every draw over the drafter's columns in drafter-id order, the
  unshared ones at probability 0; Floor on the speculative engine, the drafter alone on its plain engine by vLLM's
  own sampler) gives the transformers backend's tokens and traces, batched, and the permuted verifier's oracle
  holds under it;
- what is not ported (the drafter alone's logprobs, ...) is refused with a typed error."""

import pytest
import torch
from asymspec_vl.evals.toy.eval import VARIANTS, request_of
from helpers import assert_same_logprobs, random_request, summary
from xfamily_models import write_other_vocabulary

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.core import vocab_sampling
from asymspec_vl.core.vocab_align import VocabMap
from asymspec_vl.inputs.conversation import encode
from asymspec_vl.inputs.vocab import token_mask
from asymspec_vl.toy import world
from vllm_patches.requests.logprob_support import SUPPORT_KEY

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
        ("drafter", AsymSpecConfig(K=2, max_new_tokens=16)),
        (
            "asymspec",
            AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=16, temperature=0.9, seed=4),
        ),
        ("floor", AsymSpecConfig(K=2, max_new_tokens=16, temperature=1.5, seed=6)),
        (
            "drafter",
            AsymSpecConfig(K=2, max_new_tokens=16, temperature=1.5, top_k=30, seed=8),
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
    assert_same_logprobs(
        vllm_two.generate_batch(reqs, "asymspec", cfg),
        hf_two.generate_batch(reqs, "asymspec", cfg),
    )


@pytest.mark.parametrize(
    "cfg",
    [
        AsymSpecConfig(temperature=1.3, seed=5),
        AsymSpecConfig(temperature=0.7, top_k=5, top_p=0.8, seed=6),
        AsymSpecConfig(temperature=1.0, top_p=0.9, seed=7),
    ],
)
def test_the_drafter_alones_draw_is_vllms_own_sampler_on_its_banned_logits(cfg):
    """Why a plain drafter engine samples the drafter alone across a map: vocab_sampling's draw (over the drafter's
    columns, the unshared ones at probability 0) is, row for row, vLLM's own sampler's on the same logits with the
    unshared ids at -inf (allowed_token_ids' mask), temperature, top-k / top-p (vLLM's PyTorch filter, the CPU
    build's) and the exponential race with each row's seeded generator (v1/sample/ops/topk_topp_sampler.py)."""
    from vllm.v1.sample.ops.topk_topp_sampler import (  # lazy: loads vLLM
        apply_top_k_top_p_pytorch,
        random_sample,
    )

    g = torch.Generator().manual_seed(2)
    Vd, Vv, S, B = 50, 40, 30, 256
    vmap = VocabMap(
        torch.randperm(Vd, generator=g)[:S],
        torch.randperm(Vv, generator=g)[:S].sort().values,
        Vd,
        Vv,
    )
    q = 3 * torch.randn(B, 1, Vd, generator=g)
    ours = vocab_sampling.sample(
        "drafter",
        cfg,
        {"q": q},
        torch.zeros(B, 0, dtype=torch.long),
        None,
        vmap,
        [torch.Generator().manual_seed(100 + i) for i in range(B)],
    )
    x = q[:, 0] + torch.where(vmap.drafter_banned(None, "cpu"), float("-inf"), 0.0)
    x = x.div_(torch.full((B, 1), cfg.temperature))
    k = torch.full((B,), cfg.top_k) if cfg.top_k else None
    p = torch.full((B,), cfg.top_p) if cfg.top_p < 1 else None
    x = apply_top_k_top_p_pytorch(x, k, p, allow_cpu_sync=True)
    theirs = random_sample(
        x.softmax(-1, dtype=torch.float32),
        {i: torch.Generator().manual_seed(100 + i) for i in range(B)},
    )
    assert torch.equal(ours.token, vmap.to_verifier_ids(theirs))


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


@pytest.mark.parametrize("method", ["asymspec", "sd", "scd", "floor", "drafter"])
def test_embedded_llama_stop_strings_on_vllm_cut_as_transformers_cuts_them(
    llama_pipes, method
):
    """Stop strings across the map: each answer cut at a string from the middle of its own free answer, with and
    without the string kept, on both backends alike (the drafter alone's answer is detokenized by its own engine in
    its ids, the others' in the verifier's)."""
    hf, vl = llama_pipes
    reqs = [request_of(e) for e in world.heldout(4)]
    base = AsymSpecConfig(K=2, max_new_tokens=16)
    free = hf.generate_batch(reqs, method, base)
    stops = tuple(r.text[len(r.text) // 2 : len(r.text) // 2 + 2] for r in free)
    assert all(len(x) == 2 for x in stops)
    for include in (False, True):
        cfg = base.replace(stop=stops, include_stop_str_in_output=include)
        want = hf.generate_batch(reqs, method, cfg)
        got = vl.generate_batch(reqs, method, cfg)
        assert [(r.text, r.token_ids, r.finish_reason) for r in got] == [
            (r.text, r.token_ids, r.finish_reason) for r in want
        ]
        assert all(r.finish_reason == "stop" for r in got)


@pytest.mark.parametrize(
    "cfg",
    [
        AsymSpecConfig(K=2, max_new_tokens=10, logprobs=3),
        AsymSpecConfig(K=2, max_new_tokens=10, logprobs=3, temperature=1.5, seed=7),
    ],
)
def test_embedded_llama_drafter_alone_logprobs_on_vllm_equal_transformers(
    llama_pipes, cfg
):
    """The drafter alone's logprobs across the map: in verifier ids, each token's and its alternatives' under the
    drafter's distribution restricted to the shared set and normalised over it (its plain engine's logits -inf
    outside it before vLLM's sampler computes them: requests/logprob_support.py), as the transformers backend
    gives them; its full-vocabulary logprobs would be lower (the unshared mass)."""
    hf, vl = llama_pipes
    reqs = [request_of(e) for e in world.heldout(4)]
    want = hf.generate_batch(reqs, "drafter", cfg)
    got = vl.generate_batch(reqs, "drafter", cfg)
    assert_same_logprobs(got, want)
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    assert all({i for lp in r.logprobs for i, _ in lp.top} <= shared for r in got)


@pytest.mark.parametrize(
    "cfg",
    [
        AsymSpecConfig(K=2, max_new_tokens=10),
        AsymSpecConfig(K=2, max_new_tokens=10, temperature=1.5, seed=7, logprobs=2),
    ],
)
def test_embedded_llama_drafter_alone_bans_by_one_allowed_list_per_pair(
    llama_pipes, cfg
):
    """The drafter alone's SamplingParams across the map name what it may write as vLLM's allowed_token_ids (one bool
    row of the engine's mask, filled once when the request joins the batch): the pair's one sorted list, the same
    object in every request (skip_clone: vLLM's deep copy would copy it per request), and no logit_bias (a {id: -inf}
    dict of every unshared id, ~42k on Qwen3 x Llama-3, that vLLM rebuilt for every row at each change of the
    batch); with logprobs the unshared ids (their support's complement), also one list. Its answers, greedy and
    seeded, stay the transformers backend's."""
    hf, vl = llama_pipes
    pair, vmap = vl.pair, vl.pair.vmap
    reqs = [request_of(e) for e in world.heldout(4)]
    plan = vl.backend.plan_request("drafter", cfg)
    params = [
        vl.backend.engine_request(
            encode(r, pair.processor, pair.tokenizer, pair.cross_map), plan
        )[1]
        for r in reqs
    ]
    banned = vmap.drafter_banned(
        token_mask(pair.banned_ids(), vmap.verifier_size, "cpu"), "cpu"
    )
    allowed = (~banned).nonzero().flatten().tolist()
    assert allowed and set(allowed) <= set(vmap.drafter_ids.tolist())
    for p in params:
        assert not p.logit_bias
        assert p.allowed_token_ids is params[0].allowed_token_ids
        assert p.skip_clone
    assert params[0].allowed_token_ids == allowed
    if cfg.logprobs is not None:
        outside = vmap.drafter_banned(None, "cpu").nonzero().flatten().tolist()
        assert all(
            p.extra_args[SUPPORT_KEY] is params[0].extra_args[SUPPORT_KEY]
            for p in params
        )
        assert params[0].extra_args[SUPPORT_KEY] == outside
    got = vl.generate_batch(reqs, "drafter", cfg)
    want = hf.generate_batch(reqs, "drafter", cfg)
    assert summary(got) == summary(want)
    if cfg.logprobs is not None:
        assert_same_logprobs(got, want)


@pytest.fixture(scope="module")
def removed_pipes(tiny_models, tmp_path_factory):
    """The tiny pair with 60 tokens removed from the verifier: the untrained drafter spreads real mass over its
    unshared tokens (the trained toy drafter puts almost none there)."""
    folder, _ = write_other_vocabulary(
        tiny_models["verifier"], tmp_path_factory.mktemp("removed"), seed=7, remove=60
    )
    paths = dict(drafter=str(tiny_models["vl_drafter"]), verifier=str(folder))
    vl = AsymSpecVL.from_pretrained(**paths, backend="vllm", block_size=16)
    yield AsymSpecVL.from_pretrained(**paths, device="cpu"), vl
    vl.backend.close()


@pytest.mark.parametrize("sampled", [False, True])
def test_the_drafter_alones_logprobs_on_vllm_are_over_the_shared_set(
    removed_pipes, sampled
):
    """Where the drafter's unshared mass is not negligible its logprobs on vLLM are still the transformers
    backend's: restricted to the shared set and normalised over it, not its full vocabulary's."""
    hf, vl = removed_pipes
    hot = {"temperature": 1.5, "seed": 3} if sampled else {}
    cfg = AsymSpecConfig(K=2, max_new_tokens=8, logprobs=2, **hot)
    reqs = [random_request(s) for s in range(3)]
    assert_same_logprobs(
        vl.generate_batch(reqs, "drafter", cfg), hf.generate_batch(reqs, "drafter", cfg)
    )


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
        (
            "asymspec-K2-b1-fused",
            {**HOT, "temperature": 2.0, "top_k": 40, "top_p": 0.995},
        ),
        ("sd", HOT),
        ("scd", {**HOT, "min_p": 0.02}),
        ("floor", HOT),
        ("floor", {**HOT, "top_k": 40, "top_p": 0.9, "min_p": 0.02}),
        ("drafter", HOT),
        ("drafter", {**HOT, "top_k": 20, "top_p": 0.95, "min_p": 0.02}),
    ],
)
def test_embedded_llama_sampled_on_vllm_equals_transformers_batched(
    llama_pipes, key, changes
):
    """Seeded sampling across the map: the drafts drawn over the drafter's columns by each request's generator,
    then the method's sampled rule (core/vocab_sampling.py) with the same generator; Floor's on the speculative
    engine, the drafter alone's by vLLM's own sampler on its plain engine (allowed_token_ids bans the unshared ids)."""
    hf, vl = llama_pipes
    reqs = [request_of(e) for e in world.heldout(8)]
    variant = VARIANTS[key]
    cfg = variant.config().replace(**changes)
    expected = hf.generate_batch(reqs, variant.method, cfg)
    got = vl.generate_batch(reqs, variant.method, cfg)
    assert summary(got) == summary(expected)
    greedy = hf.generate_batch(reqs, variant.method, variant.config())
    assert [r.token_ids for r in got] != [r.token_ids for r in greedy]  # it sampled
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    assert all(set(r.token_ids) <= shared for r in got)
    if variant.method not in (
        "floor",
        "drafter",
    ):  # the drafts were drawn, and some accepted
        assert sum(r.stats.accepted for r in got) > 0
