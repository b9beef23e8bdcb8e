"""The asymspec engine's sampler across a vocabulary map of EQUAL sizes (Vd == Vv, the ids paired otherwise): the
rules read each row's verifier-id mask (RowState.banned_v), never its drafter-id one (RowState.banned). With
equal sizes a mask of the wrong space has the right shape, so only the tokens tell: the verifier's favourite is
banned, and the drafter-id mask bans other ids."""

import torch

from asymspec_vl.core import sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.vocab_align import VocabMap
from vllm_patches import sampler
from vllm_patches.requests.request_args import AsymSpecRequest
from vllm_patches.requests.rows import RowState

V = 12  # both vocabularies' rows
# verifier id -> drafter id of the shared set (0..8, paired out of order); verifier 9..11 and drafter 0, 1, 5 unshared
PAIRS = {0: 4, 1: 7, 2: 2, 3: 9, 4: 3, 5: 11, 6: 6, 7: 10, 8: 8}
FAVOURITE = 3  # the verifier's favourite, banned: drafter id 9 (the drafter-id mask bans verifier id 9 instead)
VMAP = VocabMap(
    torch.tensor([PAIRS[v] for v in sorted(PAIRS)]), torch.tensor(sorted(PAIRS)), V, V
)


def floor_rows(cfg: AsymSpecConfig, n: int) -> list[RowState]:
    """n Floor rows banning FAVOURITE, their masks built as rows.RequestRegistry builds them across a map."""
    banned_v = torch.zeros(V, dtype=torch.bool)
    banned_v[FAVOURITE] = True
    states = []
    for i in range(n):
        rcfg = cfg.replace(seed=i) if cfg.samples else cfg
        states.append(
            RowState(
                AsymSpecRequest(METHODS["floor"], rcfg),
                0,
                banned=VMAP.drafter_banned(banned_v, "cpu"),
                banned_v=banned_v,
                req_id=str(i),
                generator=sampling.generators(rcfg, 1, "cpu")[0]
                if cfg.samples
                else None,
            )
        )
    return states


def verifier_logits(n: int) -> torch.Tensor:
    """t [n, 1, V]: FAVOURITE far ahead, then the unshared 9..11, then the shared ids in random order."""
    t = torch.randn(n, 1, V, generator=torch.Generator().manual_seed(0))
    t[..., 9:] += 20
    t[..., FAVOURITE] += 40
    return t


def decided(cfg: AsymSpecConfig, n: int = 16):
    states = floor_rows(cfg, n)
    proposer = type("Proposer", (), {"vmap": VMAP})()
    t = verifier_logits(n)
    out = sampler._rule(
        proposer,
        METHODS["floor"],
        cfg,
        {"t": t},
        torch.zeros(n, 0, dtype=torch.long),
        states,
    )
    return out.token.tolist(), t


def test_a_greedy_floor_row_never_commits_its_banned_verifier_id():
    tokens, t = decided(AsymSpecConfig(K=2))
    allowed = [v for v in PAIRS if v != FAVOURITE]
    want = [max(allowed, key=lambda v: t[r, 0, v].item()) for r in range(len(tokens))]
    assert tokens == want


def test_a_sampled_floor_row_never_draws_its_banned_verifier_id():
    tokens, _ = decided(AsymSpecConfig(K=2, temperature=1.0, seed=0))
    assert set(tokens) <= set(PAIRS) - {FAVOURITE}
