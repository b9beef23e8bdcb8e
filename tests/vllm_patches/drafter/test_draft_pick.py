"""The draft pick (vllm_patches/drafter/draft_pick.py `pick`) at its edges, through its public function: draft k of
a step is judged at output position y_len + k for min_tokens (a stop token may be drafted once that position reaches
min_tokens, as the transformers loop drafts it), and a sampling row draws its draft from the banned-masked
distribution (a structural special token is never drafted, however likely the drafter finds it)."""

import torch

from asymspec_vl.core import sampling, vocab_sampling
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.vocab_align import VocabMap
from vllm_patches.drafter import draft_pick
from vllm_patches.requests.request_args import AsymSpecRequest
from vllm_patches.requests.rows import RowState

V, STOP, BANNED = 8, 3, 5


def row(cfg: AsymSpecConfig, y_len: int, stop_ids=(STOP,)) -> RowState:
    gen = sampling.generators(cfg, 1, "cpu")[0] if cfg.samples else None
    return RowState(
        AsymSpecRequest(METHODS["asymspec"], cfg, stop_ids=stop_ids),
        cfg.K,
        req_id="r",
        banned=torch.zeros(V, dtype=torch.bool),
        generator=gen,
        y_len=y_len,
    )


def stop_favoured() -> torch.Tensor:
    logits = torch.zeros(1, V)
    logits[0, STOP], logits[0, 1] = 5.0, 1.0
    return logits


def test_draft_k_is_judged_at_output_position_y_len_plus_k():
    """min_tokens 3, the row last drafted at len(y) = 1: drafts 0 and 1 sit at positions 1 and 2 (held: the next
    best token), draft 2 at position 3 (free: the stop token itself)."""
    cfg = AsymSpecConfig(K=3, min_tokens=3)
    banned = torch.zeros(1, V, dtype=torch.bool)
    got = [
        int(draft_pick.pick(stop_favoured(), [row(cfg, 1)], k, banned)[0])
        for k in range(3)
    ]
    assert got == [1, 1, STOP]
    assert (
        int(draft_pick.pick(stop_favoured(), [row(cfg, 3)], 0, banned)[0]) == STOP
    )  # y_len itself at the limit
    assert (
        int(draft_pick.pick(stop_favoured(), [row(cfg, 0, stop_ids=())], 0, banned)[0])
        == STOP
    )  # no stop set


def test_a_sampled_draft_is_never_a_banned_token():
    """The banned token holds nearly all the drafter's mass; every seed's draft is another token, the draw from
    filtered(logits) with the ban, as the transformers loop draws it."""
    logits = torch.zeros(1, V)
    logits[0, BANNED] = 12.0
    banned = torch.zeros(1, V, dtype=torch.bool)
    banned[0, BANNED] = True
    for seed in range(20):
        cfg = AsymSpecConfig(K=2, temperature=1.0, seed=seed)
        got = int(draft_pick.pick(logits, [row(cfg, 0)], 0, banned)[0])
        want = int(
            sampling.draw(
                sampling.filtered_logprobs(logits, cfg, banned[0]),
                sampling.generators(cfg, 1, "cpu"),
            )[0]
        )
        assert got == want != BANNED


def test_a_sampled_draft_across_a_map_is_the_transformers_draw_in_drafter_ids():
    """A cross-family row (vmap): the draw over the drafter's columns with its verifier-id mask
    (vocab_sampling.pick, the transformers loop's Plan.pick), handed back in the drafter's ids; an unshared
    drafter token is never drafted, however likely."""
    # drafter 8 ids, verifier 6: verifier id v is drafter id 7 - v for v < 5; drafter ids 0, 1, 2 are unshared
    vmap = VocabMap(torch.tensor([7, 6, 5, 4, 3]), torch.arange(5), V, 6)
    banned_v = torch.zeros(6, dtype=torch.bool)
    banned_v[1] = True  # drafter id 6
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(0))
    logits[0, 0] = 12.0  # unshared
    drawn = set()
    for seed in range(30):
        cfg = AsymSpecConfig(K=2, temperature=2.0, seed=seed)
        state = row(cfg, 0)
        state.banned_v = banned_v
        banned = vmap.drafter_banned(banned_v, "cpu")[None]
        got = int(draft_pick.pick(logits, [state], 0, banned, vmap=vmap)[0])
        want = vocab_sampling.pick(
            logits, cfg, banned_v, vmap, sampling.generators(cfg, 1, "cpu")
        )
        assert got == 7 - int(want[0])
        drawn.add(got)
    assert drawn <= {7, 5, 4, 3} and len(drawn) > 1
