"""What a pair's vocabularies share (pair/shared_vocab.py), as `vl.pair` says it: one family, or cross-family with
the shared set's size, each vocabulary's share and the answer-end tokens the map pairs."""

import pytest

from asymspec_vl.core.vocab_align import VocabMap
from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.pair.model_pair import ModelPair
from asymspec_vl.pair.shared_vocab import SharedVocabulary, shared_vocabulary


@pytest.fixture(scope="module")
def pairs():
    return {
        name: ModelPair.load(
            embedded_models(name)["drafter"], embedded_models(name)["verifier"]
        )
        for name in ("embedded", "embedded-llama")
    }


def test_one_family_is_said_as_one_vocabulary(pairs):
    v = pairs["embedded"].vocabulary
    assert v == SharedVocabulary(False, 426, 426, 426)
    assert v.line() == "same family: one vocabulary (426 tokens)"
    assert v.to_dict()["cross_family"] is False and v.to_dict()["answer_end"] is None
    assert (
        repr(pairs["embedded"]) == "ModelPair(same family: one vocabulary (426 tokens))"
    )


def test_a_cross_family_pair_says_its_shared_set_and_answer_end(pairs):
    pair = pairs["embedded-llama"]
    v, vmap = pair.vocabulary, pair.vmap
    assert (v.cross_family, v.shared, v.drafter_size, v.verifier_size) == (
        True,
        vmap.size,
        vmap.drafter_size,
        vmap.verifier_size,
    )
    assert v.answer_end == ("<|im_end|>", "<|eot_id|>")
    share = f"{vmap.size / vmap.drafter_size:.1%} of the drafter's {vmap.drafter_size}"
    assert v.line().startswith(f"cross-family: {vmap.size} shared tokens ({share}")
    assert v.line().endswith("answer end <|im_end|> -> <|eot_id|>")
    assert repr(pair) == f"ModelPair({v.line()})"
    assert v.to_dict() == {
        "cross_family": True,
        "shared_tokens": vmap.size,
        "drafter_vocab_size": vmap.drafter_size,
        "verifier_vocab_size": vmap.verifier_size,
        "drafter_share": round(vmap.size / vmap.drafter_size, 4),
        "verifier_share": round(vmap.size / vmap.verifier_size, 4),
        "answer_end": {"drafter": "<|im_end|>", "verifier": "<|eot_id|>"},
    }


def test_the_answer_end_falls_back_to_eos_and_may_be_absent(pairs):
    import torch

    tok = pairs["embedded"].tokenizer
    ids = torch.tensor([0, 1])
    eos = VocabMap(ids, ids, 10, 12, specials={"eos": (1, 1)})
    assert (
        shared_vocabulary(eos, tok, tok).answer_end
        == (tok.convert_ids_to_tokens(1),) * 2
    )
    none = shared_vocabulary(VocabMap(ids, ids, 10, 12), tok, tok)
    assert none.answer_end is None and "answer end" not in none.line()
    assert none.line() == (
        "cross-family: 2 shared tokens (20.0% of the drafter's 10, 16.7% of the verifier's 12)"
    )
