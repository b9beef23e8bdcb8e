"""The drafter alone's answer of a cross-family pair, from its plain engine's drafter ids into the verifier's: its
tokens (every one shared: the engine's logit_bias bans the others) and its logprobs (each token's and its top
alternatives', under the drafter's distribution restricted to the shared set: requests/logprob_support.py)."""

from __future__ import annotations

import torch

from ...core.logprobs import TokenLogprob
from ...core.methods import Method
from ...core.vocab_align import VocabMap


def speaks_drafter_ids(method: Method, vmap: VocabMap) -> bool:
    """The engine that runs `method` answers in the drafter's ids, not the verifier's."""
    return method.engine == "drafter" and not vmap.identity


def tokens(vmap: VocabMap, ids: list[int]) -> list[int]:
    """Drafter ids [n] (all shared) -> verifier ids [n], one gather."""
    return vmap.to_verifier_ids(torch.tensor(ids, dtype=torch.long)).tolist()


def logprobs(
    vmap: VocabMap, entries: list[TokenLogprob] | None
) -> list[TokenLogprob] | None:
    """Each entry's token and top alternatives in verifier ids. An alternative outside the shared set has
    logprob -inf there (listed only when more are asked for than the shared set holds) and is dropped."""
    if entries is None:
        return None
    d2v = vmap.to("cpu").d2v.tolist()  # [Vd], -1 off the shared set
    return [
        TokenLogprob(
            d2v[e.token_id],
            e.logprob,
            [(d2v[i], lp) for i, lp in e.top if d2v[i] >= 0],
            e.distribution,
        )
        for e in entries
    ]
