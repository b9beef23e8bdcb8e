"""pair/model_pair.py's banned ids on the real vocabularies: Qwen's structural tokens, its thinking markers and its
267 rows past the tokenizer (151,669 tokens, 151,936 rows), none in Llama-3's; found by one look-up per token (it
built the whole 151,936-entry vocabulary dict on every batch: 0.2-0.7 s of host time each)."""

from types import SimpleNamespace

import pytest

from asymspec_vl.inputs.vocab import STRUCTURAL_TOKENS, THINK_MARKERS
from asymspec_vl.pair.model_pair import ModelPair
from asymspec_vl.toy.real_vocab import ROWS


@pytest.mark.parametrize("family", ["qwen3", "llama3", "mistral-tekken"])
def test_banned_ids_of_a_real_vocabulary_without_its_whole_dict(
    real_shapes, family, monkeypatch
):
    tok = real_shapes.tokenizer(family)
    vocab = tok.get_vocab()
    want = sorted(
        {vocab[t] for t in STRUCTURAL_TOKENS + THINK_MARKERS if t in vocab}
        | set(range(len(tok), ROWS[family]))
    )
    pair = SimpleNamespace(tokenizer=tok, vocab_size=ROWS[family], _banned=None)
    # the first call reads the vocabulary once; every later one (the hot path) never again
    assert ModelPair.banned_ids(pair) == want
    monkeypatch.setattr(
        type(tok), "get_vocab", lambda self: pytest.fail("get_vocab() on the hot path")
    )
    got = ModelPair.banned_ids(pair)
    assert got == want
    if family == "qwen3":
        assert {151652, 151655, 151667, 151668, 151669, 151935} <= set(got)
        assert 151645 not in got  # <|im_end|> ends the answer
    else:
        assert got == []
