"""Cross-family pairs on the transformers backend (inputs/vocab_map.py + core/vocab_align.py through loop.py):
- metamorphic oracle: a verifier whose ids are permuted (same strings, embedding and output rows permuted alike)
  gives exactly the answers, traces and statistics of the original pair, every method, text and image drafters;
- a verifier with tokens removed: nothing outside the shared set is committed, and the answers equal Algorithm 1
  across the map recomputed from scratch by tests/core/xfamily_reference.py's rules."""

import math

import pytest
import torch
from core.xfamily_reference import asymspec_row, scd_row, sd_row
from helpers import ON_TEST_DEVICE, random_request
from xfamily_models import write_other_vocabulary

from asymspec_vl import AsymSpecConfig, AsymSpecVL, Request
from asymspec_vl.backends.hf.reference import logits_after
from asymspec_vl.inputs.prompts import encode_request

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]
METHODS = ("asymspec", "sd", "scd", "floor", "drafter")
CFG = AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=10)
TEXT_REQS = [
    Request(
        question=f"What is {i} + 3?",
        full_context=f"the red box holds {i} apples and 3 pears",
        compressed_context="a box",
    )
    for i in range(3)
]


@pytest.fixture(scope="module")
def permuted(tiny_models, tmp_path_factory):
    return write_other_vocabulary(
        tiny_models["verifier"], tmp_path_factory.mktemp("perm"), seed=5
    )


@pytest.fixture(scope="module")
def removed(tiny_models, tmp_path_factory):
    return write_other_vocabulary(
        tiny_models["verifier"], tmp_path_factory.mktemp("removed"), seed=7, remove=60
    )


def without_time(stats) -> dict:
    return {
        k: v
        for k, v in stats.to_dict().items()
        if k not in ("elapsed_s", "tokens_per_s")
    }


@pytest.mark.parametrize(
    "drafter,reqs",
    [
        ("text_drafter", TEXT_REQS),
        ("vl_drafter", [random_request(i) for i in range(2)]),
    ],
)
def test_permuted_verifier_ids_give_exactly_the_same_run(
    tiny_models, permuted, drafter, reqs
):
    folder, new_of = permuted
    one = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models[drafter]),
        images=drafter == "vl_drafter",
        verifier=str(tiny_models["verifier"]),
        **ON_TEST_DEVICE,
    )
    two = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models[drafter]),
        images=drafter == "vl_drafter",
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    assert one.pair.vmap.identity and not two.pair.vmap.identity
    assert two.pair.vmap.size == len(
        two.pair.tokenizer
    )  # every string shared, under other ids
    accepted = 0
    for m in METHODS:
        if m == "drafter" and drafter == "text_drafter":
            continue  # drafter-alone reads the image
        xs, ys = one.generate_batch(reqs, m, CFG), two.generate_batch(reqs, m, CFG)
        for x, y in zip(xs, ys):
            assert y.text == x.text and y.token_ids == [new_of[i] for i in x.token_ids]
            assert [t.source for t in y.trace] == [t.source for t in x.trace]
            assert without_time(y.stats) == without_time(x.stats)
            accepted += x.stats.accepted
    assert (
        accepted > 0
    )  # the gate accepted drafts: the comparison covers accepted and fused tokens


def reference_across_map(vl, enc, method: str, cfg: AsymSpecConfig) -> list[int]:
    """Algorithm 1 (and SD / SCD / Floor) across the map with every forward recomputed and the rules from
    core/xfamily_reference.py: y and drafts in verifier ids, the drafter fed drafter ids."""
    pair, be = vl.pair, vl.backend
    pairs = dict(zip(pair.vmap.verifier_ids.tolist(), pair.vmap.drafter_ids.tolist()))
    banned = set(pair.banned_ids())
    to_v = {d: v for v, d in pairs.items()}
    stop = pair.stop_ids(cfg)
    K = cfg.K if method != "floor" else 0
    y: list[int] = []
    while True:
        y_d = [pairs[v] for v in y]
        drafts_d, a = [], []
        for _ in range(K):
            view = enc.full if method == "asymspec" else enc.drafter_comp
            logits = logits_after(be.drafter, view, y_d + drafts_d, 1)[0].tolist()
            a.append(logits)
            allowed = [d for v, d in pairs.items() if v not in banned]
            drafts_d.append(
                max(sorted(allowed), key=lambda d: logits[d])
            )  # first max: lowest drafter id
        drafts = [to_v[d] for d in drafts_d]
        t = logits_after(be.verifier, enc.comp, y + drafts, K + 1).tolist()
        if method == "asymspec":
            b = logits_after(
                be.drafter, enc.drafter_comp, y_d + drafts_d, K + 1
            ).tolist()
            n, tok = asymspec_row(a + [b[-1]], b, t, drafts, pairs, cfg, banned)
        elif method == "scd":
            b = logits_after(
                be.drafter, enc.drafter_comp, y_d + drafts_d, K + 1
            ).tolist()
            n, tok = scd_row(b, t, drafts, pairs, cfg, banned)
        else:
            n, tok = sd_row(t, drafts, pairs, banned)
        for x in drafts[:n] + [tok]:
            y.append(x)
            if x in stop or len(y) >= cfg.max_new_tokens:
                return y


def test_removed_tokens_commit_only_shared_ones_and_equal_the_reference(
    tiny_models, removed
):
    folder, _ = removed
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["text_drafter"]),
        images=False,
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    assert (
        vl.pair.vmap.size == len(vl.pair.tokenizer)
        and vl.pair.vmap.drafter_size == vl.pair.vmap.size + 60
    )
    for m in ("asymspec", "sd", "scd", "floor"):
        got = vl.generate_batch(TEXT_REQS, m, CFG)
        for req, res in zip(TEXT_REQS, got):
            assert set(res.token_ids) <= shared
            enc = encode_request(
                req, vl.pair.processor, vl.pair.tokenizer, drafter_comp=vl.pair.vmap
            )
            assert res.token_ids == reference_across_map(vl, enc, m, CFG), m


def test_removed_drafter_tokens_are_never_drafted(tiny_models, removed):
    """The drafter's 60 tokens the verifier lacks are masked before every pick: a drafter that prefers them
    (their logits raised) still drafts shared tokens, and every committed token is shared."""
    folder, _ = removed
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["text_drafter"]),
        images=False,
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    unshared = sorted(
        set(range(vl.pair.vmap.drafter_size)) - set(vl.pair.vmap.drafter_ids.tolist())
    )
    with torch.no_grad():
        vl.backend.drafter.get_output_embeddings().weight[unshared] *= (
            50  # (tied: rows scaled alike)
        )
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    for res in vl.generate_batch(TEXT_REQS, "asymspec", CFG):
        assert set(res.token_ids) <= shared and res.token_ids


SAMPLED = [
    AsymSpecConfig(K=2, gamma=0.02, max_new_tokens=10, temperature=0.8, seed=5),
    AsymSpecConfig(
        K=2, max_new_tokens=10, temperature=1.2, top_k=20, top_p=0.9, seed=9
    ),
]


@pytest.mark.parametrize("cfg", SAMPLED, ids=["T0.8", "T1.2-topk-topp"])
def test_sampled_runs_on_permuted_ids_are_the_same_run(tiny_models, permuted, cfg):
    """Temperature > 0 across the map (core/vocab_sampling.py): seeded draws over the drafter's columns (the
    unshared ids at probability 0), so the permuted verifier draws the same tokens: the same answers, traces and
    statistics."""
    folder, new_of = permuted
    one, two = (
        AsymSpecVL.from_pretrained(
            drafter=str(tiny_models["vl_drafter"]), verifier=v, **ON_TEST_DEVICE
        )
        for v in (str(tiny_models["verifier"]), str(folder))
    )
    reqs = [random_request(i) for i in range(2)]
    for m in METHODS:
        xs, ys = one.generate_batch(reqs, m, cfg), two.generate_batch(reqs, m, cfg)
        for x, y in zip(xs, ys):
            assert y.text == x.text and y.token_ids == [new_of[i] for i in x.token_ids]
            assert [t.source for t in y.trace] == [t.source for t in x.trace], m
            assert without_time(y.stats) == without_time(x.stats), m


def test_sampled_runs_commit_only_shared_tokens(tiny_models, removed):
    folder, _ = removed
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["text_drafter"]),
        images=False,
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    cfg = AsymSpecConfig(K=2, max_new_tokens=12, temperature=1.5, seed=2)
    for m in ("asymspec", "sd", "scd", "floor"):
        for res in vl.generate_batch(TEXT_REQS, m, cfg):
            assert res.token_ids and set(res.token_ids) <= shared, m


@pytest.mark.parametrize(
    "drafter,reqs",
    [
        ("text_drafter", TEXT_REQS[:2]),
        ("vl_drafter", [random_request(i) for i in range(2)]),
    ],
)
def test_logprobs_and_min_tokens_on_permuted_ids_are_the_same_run(
    tiny_models, permuted, drafter, reqs
):
    """logprobs (each token's under its distribution, in verifier ids) and min_tokens (the stop tokens held in
    each model's own ids: a drafter masked at verifier ids would draft otherwise) across the map: the permuted
    verifier's run is the original's, values equal, alternatives the same tokens under their new ids. The stop
    token is one the unheld answer emits early, so min_tokens changes the answer."""
    folder, new_of = permuted
    one = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models[drafter]),
        images=drafter == "vl_drafter",
        verifier=str(tiny_models["verifier"]),
        **ON_TEST_DEVICE,
    )
    two = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models[drafter]),
        images=drafter == "vl_drafter",
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    free = one.generate_batch(reqs[:1], "asymspec", CFG)[0].token_ids
    stop = free[1]  # emitted second: with min_tokens=5 it cannot end the answer there
    held, moved = (
        CFG.replace(logprobs=2, min_tokens=5, stop_token_ids=(s,))
        for s in (stop, new_of[stop])
    )
    for m in METHODS:
        if m == "drafter" and drafter == "text_drafter":
            continue
        xs, ys = one.generate_batch(reqs, m, held), two.generate_batch(reqs, m, moved)
        for x, y in zip(xs, ys):
            assert (
                y.token_ids == [new_of[i] for i in x.token_ids]
                and len(x.token_ids) >= 5
            ), m
            assert without_time(y.stats) == without_time(x.stats)
            for a, b in zip(x.logprobs, y.logprobs):
                assert (new_of[a.token_id], a.distribution) == (
                    b.token_id,
                    b.distribution,
                )
                assert b.logprob == pytest.approx(a.logprob, abs=1e-4)
                finite = [
                    (i, j) for (i, v), (j, _) in zip(a.top, b.top) if v > float("-inf")
                ]  # -inf: ties
                assert [new_of[i] for i, _ in finite] == [j for _, j in finite], m
    assert (
        stop not in one.generate_batch(reqs[:1], "asymspec", held)[0].token_ids[:5]
    )  # the hold held


def test_logprobs_across_removed_tokens_name_only_shared_ones(tiny_models, removed):
    """With tokens missing from the verifier, every alternative a logprob lists is in the shared set and each
    distribution is normalised over it (the probabilities of all shared tokens sum to 1)."""
    folder, _ = removed
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["text_drafter"]),
        images=False,
        verifier=str(folder),
        **ON_TEST_DEVICE,
    )
    shared = set(vl.pair.vmap.verifier_ids.tolist())
    cfg = CFG.replace(logprobs=len(shared) + 5)
    for m in ("asymspec", "sd", "scd", "floor"):
        for res in vl.generate_batch(TEXT_REQS[:1], m, cfg):
            for lp in res.logprobs:
                ids = [i for i, v in lp.top if v > float("-inf")]
                assert set(ids) <= shared and lp.token_id in shared
                if (
                    lp.distribution != "contrastive"
                ):  # SCD's target is -inf off its plausible set
                    assert sum(math.exp(v) for _, v in lp.top) == pytest.approx(
                        1.0, abs=1e-3
                    )


def test_a_conversation_on_the_permuted_pair_is_the_same_run(tiny_models, permuted):
    """generate_chat (the server's encoding path: conversation.encode with the pair's cross_map)."""
    from asymspec_vl import Conversation

    folder, new_of = permuted
    conv = Conversation(
        [
            {"role": "user", "content": "the red box holds 7 apples"},
            {"role": "assistant", "content": "noted"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "image": random_request(1).image,
                        "caption": "a chart",
                    },
                    {"type": "text", "text": "how many?"},
                ],
            },
        ]
    )
    one = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        **ON_TEST_DEVICE,
    )
    two = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(folder), **ON_TEST_DEVICE
    )
    x, y = (vl.generate_batch([conv], "asymspec", CFG)[0] for vl in (one, two))
    assert y.text == x.text and y.token_ids == [new_of[i] for i in x.token_ids]
    assert without_time(y.stats) == without_time(x.stats)
