"""The vocabulary map of an asymspec engine's pair, built in the worker from the two models' names by the same
ModelPair.load the client uses (so both backends read one map and one set of rules); None for one vocabulary
(a same-family pair keeps today's unmapped path), and what a cross-family engine refuses per request."""

from __future__ import annotations

import torch

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.vocab_align import VocabMap
from asymspec_vl.pair import map_cache


def engine_vocab_map(vllm_config) -> VocabMap | None:
    """The map between the drafter's (draft model's) and the verifier's (target's) vocabularies, or None when
    both tokenizers are one vocabulary."""
    from asymspec_vl.pair.model_pair import ModelPair  # lazy: loads transformers

    draft = vllm_config.speculative_config.draft_model_config
    target = vllm_config.model_config
    # the drafter's own folder: vLLM gives the draft ModelConfig the target's tokenizer (speculative.py); the
    # engine's drafter may be SD's text drafter (images=False: a text-only drafter passes the preflight)
    # the client's own map when the engine core runs in its process (map_cache.py), else read from the folders
    vmap = map_cache.recall(
        map_cache.key(draft.model, target.tokenizer, target.trust_remote_code)
    )
    if vmap is None:
        vmap = ModelPair.load(
            draft.model,
            target.tokenizer,
            trust_remote_code=target.trust_remote_code,
            images=False,
        ).vmap
    return None if vmap.identity else vmap


def cross_family_refusal(request) -> Exception | None:
    """Why a cross-family engine cannot serve this request (None: it can). request: the parsed AsymSpecRequest
    (None: a plain request). A structured output is served: its grammar's dead ends fail the request alone
    (grammar_dead_end.py)."""
    if request is None:
        return ConfigError(
            "a cross-family engine (two vocabularies) serves asymspec requests only (extra_args['asymspec']): a "
            "plain speculative request carries no x_comp in the drafter's ids"
        )
    if request.x_comp_drafter is None and request.reads_drafter_comp:
        return ConfigError(
            f"mode {request.method.name!r} on a cross-family engine needs extra_args['asymspec']['x_comp_drafter'] "
            "(x_comp in the drafter's own ids and template)"
        )
    return None


def to_drafter_ids(vmap: VocabMap, known: list[int], y: list[int]) -> list[int]:
    """y (verifier ids) in drafter ids, extending `known` (y's translation so far, a prefix) by one gather of the
    new tokens; a y shorter than `known` (a held-back token) cuts it. ConfigError for an unshared token."""
    del known[len(y) :]
    if len(y) > len(known):
        known.extend(
            vmap.to_drafter_ids(
                torch.tensor(y[len(known) :], dtype=torch.long)
            ).tolist()
        )
    return known
