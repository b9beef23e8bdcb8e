"""The sampled rules across a vocabulary map (core/vocab_sampling.py): a full map in one order is sampling.py's
rules draw for draw, a permuted verifier draws the same tokens, only shared tokens are drawn, and SD's tokens are
distributed as the verifier restricted to the shared set (the token-level-intersection rule is lossless there)."""

import pytest
import torch

from asymspec_vl.core import methods, sampling, vocab_sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.vocab_align import VocabMap

from .test_vocab_align import pair_world, permuted_verifier

NAMES = ("asymspec", "sd", "scd", "floor", "drafter")
CFGS = [
    AsymSpecConfig(K=3, temperature=0.8, seed=3),
    AsymSpecConfig(K=3, temperature=1.3, top_k=5, top_p=0.9, seed=4, bonus="fused"),
    AsymSpecConfig(K=3, temperature=0.6, min_p=0.05, seed=5, delta_source="scd"),
]


def logits_by_name(a, b, t, K):
    """The step's logits by name as the loop hands them (methods.py): q is the drafter alone's one position."""
    return {"a": a[:, :K], "b": b, "t": t, "sd": a[:, :K], "q": a[:, :1]}


def gens(cfg, rows):
    return sampling.generators(cfg, rows, "cpu")


def run_rule(name, cfg, x, drafts, banned, vmap=None):
    """One sampled step of `name` with fresh seeded generators: across `vmap`, or the one-vocabulary rule."""
    k = drafts if name not in ("floor", "drafter") else drafts[:, :0]
    g = gens(cfg, drafts.shape[0])
    if vmap is None:
        return methods.METHODS[name].sample(cfg, x, k, banned, g)
    return vocab_sampling.sample(name, cfg, x, k, banned, vmap, g)


@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: f"T{c.temperature}-{c.bonus}")
@pytest.mark.parametrize("name", NAMES)
def test_a_full_map_in_one_order_is_the_one_vocabulary_rule_draw_for_draw(name, cfg):
    """Every id paired with itself, but not flagged identity: the mapped path must draw exactly what
    sampling.py draws with the same generators (a wrong gather, order or banned mask breaks this)."""
    g = torch.Generator().manual_seed(11)
    V, B, K = 30, 64, cfg.K
    a, b, t = (2 * torch.randn(B, K + 1, V, generator=g) for _ in range(3))
    t[..., :10] += a[..., :10]
    banned = torch.zeros(V, dtype=torch.bool)
    banned[[4, 17]] = True
    drafts = sampling.draw(
        sampling.filtered_logprobs(a[:, :K].reshape(-1, V), cfg, banned),
        gens(cfg, B * K),
    ).view(B, K)
    full = VocabMap(torch.arange(V), torch.arange(V), V, V)
    x = logits_by_name(a, b, t, K)
    want = run_rule(name, cfg, x, drafts, banned)
    got = run_rule(name, cfg, x, drafts, banned, full)
    assert torch.equal(want.num_accepted, got.num_accepted), name
    assert torch.equal(want.token, got.token), name
    assert torch.equal(want.is_bonus, got.is_bonus), name


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", NAMES)
def test_a_permuted_verifier_draws_the_same_tokens(seed, name):
    """The same strings under other verifier ids: identical accepted counts, tokens read back through the
    permutation, and identical drafts from pick (every draw's columns are the drafter's ids)."""
    cfg = AsymSpecConfig(K=3, temperature=0.9, top_k=8, seed=seed)
    a, b, t, _, vmap, pairs = pair_world(seed, B=16)
    perm, t2, vmap2 = permuted_verifier(t, vmap, pairs, seed + 50)
    drafts = torch.stack(
        [
            vocab_sampling.pick(a[:, k], cfg, None, vmap, gens(cfg, 16))
            for k in range(cfg.K)
        ],
        1,
    )
    drafts2 = torch.stack(
        [
            vocab_sampling.pick(a[:, k], cfg, None, vmap2, gens(cfg, 16))
            for k in range(cfg.K)
        ],
        1,
    )
    assert torch.equal(perm[drafts], drafts2)
    one = run_rule(name, cfg, logits_by_name(a, b, t, 3), drafts, None, vmap)
    two = run_rule(name, cfg, logits_by_name(a, b, t2, 3), drafts2, None, vmap2)
    assert torch.equal(one.num_accepted, two.num_accepted)
    assert torch.equal(perm[one.token], two.token)


def test_only_shared_unbanned_tokens_are_drawn():
    a, b, t, _, vmap, pairs = pair_world(2, B=256)
    cfg = AsymSpecConfig(K=3, temperature=2.0, seed=1)  # flat: every token has mass
    banned = torch.zeros(vmap.verifier_size, dtype=torch.bool)
    banned[vmap.verifier_ids[:3]] = True
    allowed = set(vmap.verifier_ids[3:].tolist())
    drafts = torch.stack(
        [
            vocab_sampling.pick(a[:, k], cfg, banned, vmap, gens(cfg, 256))
            for k in range(3)
        ],
        1,
    )
    assert set(drafts.flatten().tolist()) <= allowed
    for name in NAMES:
        out = run_rule(name, cfg, logits_by_name(a, b, t, 3), drafts, banned, vmap)
        assert set(out.token.tolist()) <= allowed, name


def test_sd_across_the_map_commits_the_verifiers_distribution_on_the_shared_set():
    """Lossless on the shared set: SD's first committed token (the first draft if accepted, else the token
    drawn after it) is distributed as filtered(t restricted to the shared set), which the Floor draws from; the
    drafter's distribution differs from it, so a rule that kept drafts too often would show. 40,000 rows."""
    torch.manual_seed(0)
    a, b, t, _, vmap, _ = pair_world(4, B=1, K=1)
    N, cfg = 40_000, AsymSpecConfig(K=1, temperature=1.0, seed=None)
    a, b, t = (x.expand(N, -1, -1).contiguous() for x in (a, b, t))
    g = sampling.generators(AsymSpecConfig(seed=7), N, "cpu")
    for i, gi in enumerate(g):
        gi.manual_seed(1000 + i)
    drafts = vocab_sampling.pick(a[:, 0], cfg, None, vmap, g)[:, None]
    out = vocab_sampling.sample(
        "sd", cfg, logits_by_name(a, b, t, 1), drafts, None, vmap, g
    )
    first = torch.where(out.num_accepted > 0, drafts[:, 0], out.token)
    empirical = torch.bincount(first, minlength=vmap.verifier_size).float() / N
    p = torch.zeros(vmap.verifier_size)
    p[vmap.verifier_ids] = t[0, 0, vmap.verifier_ids].softmax(-1)
    q = torch.zeros(vmap.verifier_size)
    q[vmap.verifier_ids] = a[0, 0, vmap.drafter_ids].softmax(-1)
    assert 0.5 * (empirical - p).abs().sum() < 0.02
    assert 0.5 * (q - p).abs().sum() > 0.1  # the drafts alone would not pass


def test_a_method_without_a_rule_is_a_typed_error():
    from asymspec_vl.core.errors import ConfigError

    a, b, t, drafts, vmap, _ = pair_world(0)
    with pytest.raises(ConfigError, match="no sampled rule"):
        vocab_sampling.sample(
            "beam",
            CFGS[0],
            logits_by_name(a, b, t, 3),
            drafts,
            None,
            vmap,
            gens(CFGS[0], 6),
        )


@pytest.mark.parametrize("name", NAMES)
def test_every_sampled_rule_reads_t_with_the_end_aliases_folded(name):
    """Across a map with end aliases a seeded step draws what the map without draws on the merged t."""
    from .test_vocab_align import ended_world, merged

    a, b, t, drafts, ended, plain, end, aliases = ended_world(3)
    cfg = CFGS[0]
    x = logits_by_name(a, b, t, cfg.K)
    got = run_rule(name, cfg, x, drafts, None, ended)
    want = run_rule(name, cfg, {**x, "t": merged(t, end, aliases)}, drafts, None, plain)
    assert torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.token, want.token)
