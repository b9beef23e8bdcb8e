"""The rules across a vocabulary map (core/vocab_align.py) against the from-scratch oracle, the identity map against
gate.py bit for bit, and the metamorphic oracle: permuting the verifier's ids changes no decision."""

import math

import pytest
import torch

from asymspec_vl.core import gate, logprobs, vocab_align
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.vocab_align import VocabMap

from .xfamily_reference import asymspec_row, scd_row, sd_row

CFGS = [
    AsymSpecConfig(K=3),
    AsymSpecConfig(K=3, gate="fixed"),
    AsymSpecConfig(K=3, gate="lambda"),
    AsymSpecConfig(K=3, gate="kl"),
    AsymSpecConfig(K=3, bonus="fused", beta=0.5),
    AsymSpecConfig(K=3, delta_source="raw"),
    AsymSpecConfig(K=3, delta_source="scd", gamma=0.2),
]


def pair_world(seed: int, strings: int = 40, B: int = 6, K: int = 3):
    """Two vocabularies over `strings` token strings (each holds ~3/4 of them, under its own ids), logits that
    agree on the strings, and drafts = the drafter's greedy picks over the shared set.
    -> (a, b [B, K+1, Vd], t [B, K+1, Vv], drafts [B, K] verifier ids, map, pairs {verifier id: drafter id})."""
    g = torch.Generator().manual_seed(seed)
    in_d, in_v = (
        torch.rand(strings, generator=g) < 0.75,
        torch.rand(strings, generator=g) < 0.75,
    )
    in_d[:4] = in_v[:4] = True  # at least a few shared strings
    d_of = {
        s: i
        for i, s in enumerate(
            torch.nonzero(in_d)
            .flatten()[torch.randperm(int(in_d.sum()), generator=g)]
            .tolist()
        )
    }
    v_of = {
        s: i
        for i, s in enumerate(
            torch.nonzero(in_v)
            .flatten()[torch.randperm(int(in_v.sum()), generator=g)]
            .tolist()
        )
    }
    Vd, Vv = (
        len(d_of) + 2,
        len(v_of) + 3,
    )  # logit rows past the tokens (padding of the lm_head)
    base = torch.randn(B, K + 1, strings, generator=g) * 2
    a = torch.randn(B, K + 1, Vd, generator=g)
    b = torch.randn(B, K + 1, Vd, generator=g)
    t = torch.randn(B, K + 1, Vv, generator=g)
    for s, i in d_of.items():
        a[..., i] = base[..., s] + 0.3 * torch.randn(B, K + 1, generator=g)
        b[..., i] = 0.5 * base[..., s] + torch.randn(B, K + 1, generator=g)
    for s, j in v_of.items():
        t[..., j] = base[..., s] + 0.5 * torch.randn(B, K + 1, generator=g)
    pairs = {v_of[s]: d_of[s] for s in d_of if s in v_of}
    vids = sorted(pairs)
    vmap = VocabMap(torch.tensor([pairs[j] for j in vids]), torch.tensor(vids), Vd, Vv)
    drafts_d = gate.greedy(a[:, :K], vmap.drafter_banned(None, "cpu"))
    return a, b, t, vmap.to_verifier_ids(drafts_d), vmap, pairs


def permuted_verifier(t, vmap, pairs, seed: int):
    """The same strings under other verifier ids: (perm old -> new [Vv], t with its columns permuted alike,
    the map of the permuted pair)."""
    perm = torch.randperm(
        vmap.verifier_size, generator=torch.Generator().manual_seed(seed)
    )
    t2 = t[..., torch.argsort(perm)]  # t2[new] = t[old]
    new_pairs = {int(perm[j]): d for j, d in pairs.items()}
    vids = sorted(new_pairs)
    vmap2 = VocabMap(
        torch.tensor([new_pairs[j] for j in vids]),
        torch.tensor(vids),
        vmap.drafter_size,
        vmap.verifier_size,
    )
    return perm, t2, vmap2


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "cfg", CFGS, ids=lambda c: f"{c.gate}-{c.delta_source}-{c.bonus}"
)
def test_asymspec_equals_the_oracle(seed, cfg):
    a, b, t, drafts, vmap, pairs = pair_world(seed)
    banned = torch.zeros(vmap.verifier_size, dtype=torch.bool)
    banned[sorted(pairs)[1]] = True
    out = vocab_align.asymspec_step(a, b, t, drafts, cfg, vmap, banned)
    for r in range(a.shape[0]):
        n, tok = asymspec_row(
            a[r].tolist(),
            b[r].tolist(),
            t[r].tolist(),
            drafts[r].tolist(),
            pairs,
            cfg,
            {sorted(pairs)[1]},
        )
        assert (int(out.num_accepted[r]), int(out.token[r])) == (n, tok)
        assert tok in pairs  # never a token outside the shared set


@pytest.mark.parametrize("seed", range(6))
def test_sd_floor_scd_equal_the_oracle(seed):
    a, b, t, drafts, vmap, pairs = pair_world(seed)
    cfg = AsymSpecConfig(K=3)
    sd = vocab_align.decide_sd(t, drafts, vmap)
    floor = vocab_align.decide_sd(t[:, :1], drafts[:, :0], vmap)
    scd = vocab_align.decide_scd(b, t, drafts, cfg, vmap)
    for r in range(a.shape[0]):
        assert (int(sd.num_accepted[r]), int(sd.token[r])) == sd_row(
            t[r].tolist(), drafts[r].tolist(), pairs
        )
        assert int(floor.token[r]) == sd_row(t[r, :1].tolist(), [], pairs)[1]
        assert (int(scd.num_accepted[r]), int(scd.token[r])) == scd_row(
            b[r].tolist(), t[r].tolist(), drafts[r].tolist(), pairs, cfg
        )


def test_sd_is_lossless_against_the_verifier_on_the_shared_set():
    """Accepted drafts plus the emitted token are the verifier's greedy tokens over the shared set."""
    a, b, t, drafts, vmap, pairs = pair_world(3)
    out = vocab_align.decide_sd(t, drafts, vmap)
    target = gate.greedy(t, vmap.verifier_banned(None, "cpu"))
    for r, row in enumerate(out.committed(drafts)):
        assert row == target[r, : len(row)].tolist()


@pytest.mark.parametrize(
    "cfg", CFGS, ids=lambda c: f"{c.gate}-{c.delta_source}-{c.bonus}"
)
def test_identity_map_is_gate_py_bit_for_bit(cfg):
    g = torch.Generator().manual_seed(1)
    a, b, t = (torch.randn(5, 4, 30, generator=g) for _ in range(3))
    t[..., :10] += a[..., :10]
    drafts = a[:, :3].argmax(-1)
    vmap = VocabMap.same_vocabulary(30)
    want = gate.asymspec_step(a, b, t, drafts, cfg)
    got = vocab_align.asymspec_step(a, b, t, drafts, cfg, vmap)
    assert torch.equal(want.num_accepted, got.num_accepted) and torch.equal(
        want.token, got.token
    )
    assert torch.equal(want.divergence, got.divergence)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "cfg", CFGS, ids=lambda c: f"{c.gate}-{c.delta_source}-{c.bonus}"
)
def test_permuting_the_verifier_ids_changes_no_decision(seed, cfg):
    """Metamorphic oracle: the same strings under other verifier ids (t's columns permuted alike) give the same
    accepted counts and the same tokens, read back through the permutation; a wrong map fails this."""
    a, b, t, drafts, vmap, pairs = pair_world(seed)
    perm, t2, vmap2 = permuted_verifier(t, vmap, pairs, seed + 100)
    for step in (
        lambda tt, dd, m: vocab_align.asymspec_step(a, b, tt, dd, cfg, m),
        lambda tt, dd, m: vocab_align.decide_sd(tt, dd, m),
        lambda tt, dd, m: vocab_align.decide_scd(b, tt, dd, cfg, m),
    ):
        one, two = step(t, drafts, vmap), step(t2, perm[drafts], vmap2)
        assert torch.equal(one.num_accepted, two.num_accepted)
        assert torch.equal(perm[one.token], two.token)


def test_a_wrong_map_is_caught_by_the_oracle():
    """Pairing the shared tokens the wrong way round (the drafter ids reversed) changes the answers the oracle
    gives: the oracle tests can fail."""
    a, b, t, drafts, vmap, pairs = pair_world(0)
    cfg = AsymSpecConfig(K=3)
    swapped = vmap.drafter_ids.flip(0)
    wrong = VocabMap(swapped, vmap.verifier_ids, vmap.drafter_size, vmap.verifier_size)
    ok = vocab_align.asymspec_step(a, b, t, drafts, cfg, vmap)
    bad = vocab_align.asymspec_step(a, b, t, drafts, cfg, wrong)
    expected = [
        asymspec_row(
            a[r].tolist(), b[r].tolist(), t[r].tolist(), drafts[r].tolist(), pairs, cfg
        )
        for r in range(a.shape[0])
    ]
    assert [(int(n), int(x)) for n, x in zip(ok.num_accepted, ok.token)] == expected
    assert [(int(n), int(x)) for n, x in zip(bad.num_accepted, bad.token)] != expected


def test_ids_outside_the_shared_set_are_refused():
    _, _, _, _, vmap, pairs = pair_world(0)
    outside = next(j for j in range(vmap.verifier_size) if j not in pairs)
    with pytest.raises(Exception, match="outside the shared set"):
        vmap.to_drafter_ids(torch.tensor([outside]))


def ended_world(seed: int):
    """pair_world with a shared answer end and two of the verifier's padding rows as its end aliases, each end id
    0.3 below the best shared token at every position (together they beat it), the first position of row 0
    excluding the end (-inf), and half the rows drafting the end first.
    -> (a, b, t, drafts, the map with aliases, the same map without, answer end, aliases)."""
    a, b, t, drafts, vmap, pairs = pair_world(seed)
    end = sorted(pairs)[2]
    aliases = (vmap.verifier_size - 3, vmap.verifier_size - 1)
    best = t.masked_fill(vmap.verifier_banned(None, "cpu"), float("-inf")).amax(-1)
    for j in (end, *aliases):
        t[..., j] = best - 0.3
    t[0, 0, end] = float("-inf")
    drafts[::2, 0] = end
    ended = VocabMap(
        vmap.drafter_ids,
        vmap.verifier_ids,
        vmap.drafter_size,
        vmap.verifier_size,
        specials={"answer_end": (pairs[end], end)},
        end_aliases=aliases,
    )
    return a, b, t, drafts, ended, vmap, end, aliases


def merged(t, end, aliases):
    """The oracle of fold_ends, written out: the aliases' probability moved to the end where the end is not -inf."""
    out = t.clone()
    for idx in torch.nonzero(t[..., end] > float("-inf")).tolist():
        cols = t[(*idx, [end, *aliases])]
        out[(*idx, end)] = torch.logsumexp(cols, 0)
        out[(*idx, list(aliases))] = float("-inf")
    return out


def test_fold_ends_moves_the_aliases_mass_to_the_answer_end_and_nothing_else():
    _, _, t, _, ended, plain, end, aliases = ended_world(0)
    folded = ended.fold_ends(t)
    assert torch.allclose(folded, merged(t, end, aliases), atol=1e-6)
    # every softmax is the same distribution with the end's mass gathered: the totals agree
    assert torch.allclose(folded.logsumexp(-1), t.logsumexp(-1), atol=1e-5)
    # an excluded end stays excluded, its aliases untouched (off the shared set: never emitted)
    assert folded[0, 0, end] == float("-inf")
    assert torch.equal(folded[0, 0, list(aliases)], t[0, 0, list(aliases)])
    assert torch.equal(ended.fold_ends(folded), folded)  # idempotent
    assert plain.fold_ends(t) is t  # no aliases: t itself, no copy


@pytest.mark.parametrize("name", ["asymspec", "sd", "floor", "scd"])
@pytest.mark.parametrize(
    "cfg", CFGS, ids=lambda c: f"{c.gate}-{c.delta_source}-{c.bonus}"
)
def test_every_rule_reads_t_with_the_end_aliases_folded(name, cfg):
    """decide across a map with end aliases is decide on the merged t (the oracle) across the map without: the
    gate, the fused and bonus picks, SD's and SCD's targets all see the verifier's whole end mass. And the fold
    matters: without it the rows end less often."""
    a, b, t, drafts, ended, plain, end, aliases = ended_world(1)
    x = {"a": a[:, :3], "b": b, "t": t}
    k = drafts if name != "floor" else drafts[:, :0]
    got = vocab_align.decide(name, cfg, x, k, None, ended)
    want = vocab_align.decide(
        name, cfg, {**x, "t": merged(t, end, aliases)}, k, None, plain
    )
    assert torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.token, want.token)
    unfolded = vocab_align.decide(name, cfg, x, k, None, plain)
    ends = lambda o: sum(end in row for row in o.committed(k))  # noqa: E731
    assert ends(got) > ends(unfolded)


def test_logprobs_read_t_with_the_end_aliases_folded():
    a, b, t, drafts, ended, plain, end, aliases = ended_world(2)
    cfg = AsymSpecConfig(K=3)
    x = {"a": a[:, :3], "b": b, "t": t}
    for name in ("t", "fused", "contrastive"):
        got = vocab_align.shared_scores(name, cfg, x, 4, ended)
        want = vocab_align.shared_scores(
            name, cfg, {**x, "t": merged(t, end, aliases)}, 4, plain
        )
        assert torch.allclose(got, want, atol=1e-5), name


def shared_logprob(scores: dict[int, float], token: int) -> float:
    """log softmax over the shared set, from scratch: scores {verifier id: raw score} of the shared tokens only."""
    top = max(scores.values())
    return (
        scores[token] - top - math.log(sum(math.exp(x - top) for x in scores.values()))
    )


@pytest.mark.parametrize("method", ["asymspec", "floor", "sd"])
def test_logprobs_across_a_map_are_over_the_shared_set_from_scratch(method):
    """Each committed token's logprob is its distribution's log-softmax over the shared set only, computed here from
    the raw logits (both backends read the same function, so comparing them cannot catch a lost restriction), and
    every alternative is a shared token."""
    a, b, t, drafts, vmap, pairs = pair_world(0)
    cfg = AsymSpecConfig(
        K=3, gamma=0.6
    )  # rows 1 and 5 reject their first draft, the others take the bonus
    assert cfg.delta_source == "contrastive" and cfg.bonus == "verifier"
    x = {"a": a[:, :3], "b": b, "t": t}
    k = drafts if method != "floor" else drafts[:, :0]
    outcome = vocab_align.decide(method, cfg, x, k, None, vmap)
    rows = logprobs.step_logprobs(method, cfg, x, outcome, k, 5, vmap)
    seen = set()
    for r, row in enumerate(rows):
        for j, entry in enumerate(row):
            raw = {
                "t": {v: t[r, j, v].item() for v in pairs},
                "a": {v: a[r, j, d].item() for v, d in pairs.items()},
                "fused": {
                    v: (t[r, j, v] + cfg.beta * (a[r, j, d] - b[r, j, d])).item()
                    for v, d in pairs.items()
                },
            }[entry.distribution]
            assert entry.logprob == pytest.approx(
                shared_logprob(raw, entry.token_id), abs=1e-4
            )
            assert len(entry.top) == 5 and {i for i, _ in entry.top} <= set(pairs)
            seen.add(entry.distribution)
    assert seen == ({"a", "fused", "t"} if method == "asymspec" else {"t"})


def test_the_drafter_alone_never_picks_an_unshared_token():
    """q's best token is outside the shared set (a drafter-only string) in every row, and its best shared token is
    banned in row 0: the drafter alone emits the best allowed shared token, as a verifier id."""
    a, _, _, _, vmap, pairs = pair_world(2)
    q = a[:, :1].clone()  # [B, 1, Vd]
    unshared = next(i for i in range(vmap.drafter_size) if i not in pairs.values())
    q[..., unshared] = q.max() + 10
    best = {
        r: max(pairs, key=lambda v: q[r, 0, pairs[v]].item()) for r in range(len(q))
    }
    banned = torch.zeros(vmap.verifier_size, dtype=torch.bool)
    banned[best[0]] = True
    out = vocab_align.decide(
        "drafter",
        AsymSpecConfig(K=3),
        {"q": q},
        torch.zeros(len(q), 0, dtype=torch.long),
        banned,
        vmap,
    )
    for r in range(len(q)):
        allowed = {v: q[r, 0, d].item() for v, d in pairs.items() if not banned[v]}
        assert int(out.token[r]) == max(allowed, key=allowed.get)
    assert int(out.token[0]) != best[0]
