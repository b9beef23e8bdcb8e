"""The drafter alone's answer of a cross-family pair on its plain engine: the drafter ids it may write (its
SamplingParams.allowed_token_ids: the shared set less the pair's banned tokens, one list per pair) and its answer
moved from those drafter ids into the verifier's: its tokens and its logprobs (each token's and its top
alternatives', under the drafter's distribution restricted to the shared set: requests/logprob_support.py)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...core.errors import ConfigError
from ...core.logprobs import TokenLogprob
from ...core.methods import Method
from ...core.vocab_align import VocabMap
from ...inputs.vocab import token_mask


class DrafterAloneIds(NamedTuple):
    """What every drafter-alone request of one cross-family pair names, made once per pair (lists: vLLM's
    SamplingParams fields; the same list objects go with every request, never copied per request)."""

    allowed: list[
        int
    ]  # drafter ids it may write, sorted: SamplingParams.allowed_token_ids
    outside: list[
        int
    ]  # drafter ids outside the shared set, sorted: its logprobs' support (SUPPORT_KEY)


def drafter_alone_ids(vmap: VocabMap, banned_v: list[int]) -> DrafterAloneIds:
    """The drafter alone's ids across `vmap` given the pair's banned tokens (verifier ids `banned_v`): allowed, the
    shared set less those, is what vLLM fills one bool row of its mask from when a request joins the batch
    (v1/worker/gpu_input_batch.py); a -inf logit_bias at each of the other ~42k ids (Qwen x Llama-3) was rebuilt
    from Python lists for every row at each change of the batch."""
    banned = vmap.drafter_banned(
        token_mask(banned_v, vmap.verifier_size, "cpu"), "cpu"
    )  # [Vd] bool
    allowed = (~banned).nonzero().flatten().tolist()
    if not allowed:
        raise ConfigError(
            "the pair's banned tokens cover its whole shared set: the drafter alone has no token to write; "
            "pair a verifier that shares ordinary tokens with the drafter"
        )
    outside = vmap.drafter_banned(None, "cpu").nonzero().flatten().tolist()
    return DrafterAloneIds(allowed, outside)


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
    # only the ids the entries name are moved (one gather): no list of the drafter's whole vocabulary per answer
    named = sorted(
        {e.token_id for e in entries} | {i for e in entries for i, _ in e.top}
    )
    moved = vmap.to("cpu").d2v[
        torch.tensor(named, dtype=torch.long)
    ]  # [n], -1 off the shared set
    d2v = dict(zip(named, moved.tolist()))
    return [
        TokenLogprob(
            d2v[e.token_id],
            e.logprob,
            [(d2v[i], lp) for i, lp in e.top if d2v[i] >= 0],
            e.distribution,
        )
        for e in entries
    ]
