"""The drafter alone's answer moved to the verifier's ids (backends/vllm/drafter_answer.py) on a small map: tokens
by one gather, logprobs with their top alternatives, an unshared alternative (-inf under the restricted
distribution) dropped; a same-family pair and the verifier's methods keep their ids."""

import pytest
import torch

from asymspec_vl.backends.vllm import drafter_answer
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.logprobs import TokenLogprob
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.vocab_align import VocabMap

# drafter 6 ids, verifier 4: drafter id d is verifier id 3 - d for d < 4; drafter ids 4 and 5 are unshared
VMAP = VocabMap(torch.tensor([3, 2, 1, 0]), torch.arange(4), 6, 4)


def test_tokens_and_logprobs_cross_to_the_verifiers_ids():
    assert drafter_answer.tokens(VMAP, [0, 3, 1]) == [3, 0, 2]
    entries = [TokenLogprob(1, -0.5, [(1, -0.5), (4, float("-inf"))], "q")]
    (moved,) = drafter_answer.logprobs(VMAP, entries)
    assert moved == TokenLogprob(2, -0.5, [(2, -0.5)], "q")
    assert drafter_answer.logprobs(VMAP, None) is None
    with pytest.raises(ConfigError, match="outside the shared set"):
        drafter_answer.tokens(VMAP, [5])


def test_only_the_drafter_alone_of_a_cross_family_pair_speaks_the_drafters_ids():
    assert drafter_answer.speaks_drafter_ids(METHODS["drafter"], VMAP)
    assert not drafter_answer.speaks_drafter_ids(METHODS["floor"], VMAP)
    same = VocabMap.same_vocabulary(6)
    assert not drafter_answer.speaks_drafter_ids(METHODS["drafter"], same)


def test_the_drafter_alone_may_write_the_shared_set_less_the_pairs_banned_tokens():
    """drafter_alone_ids: allowed (vLLM's allowed_token_ids) is the shared set less the pair's banned tokens (verifier
    ids, moved to the drafter's), outside (its logprobs' support) the unshared drafter ids; both sorted lists."""
    ids = drafter_answer.drafter_alone_ids(VMAP, [2])  # verifier id 2 is drafter id 1
    assert ids.allowed == [0, 2, 3]
    assert ids.outside == [4, 5]
    assert drafter_answer.drafter_alone_ids(VMAP, []).allowed == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="no token to write"):
        drafter_answer.drafter_alone_ids(VMAP, [0, 1, 2, 3])
