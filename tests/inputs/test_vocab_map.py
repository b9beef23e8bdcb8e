"""The vocabulary map (inputs/vocab_map.py): string-identical tokens by decoded bytes, specials by role, the
identity path of one vocabulary, and the typed errors that name the numbers."""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from asymspec_vl.core.errors import VocabularyMismatchError
from asymspec_vl.inputs.vocab_map import (
    build_vocab_map,
    describe,
    special_names,
    token_bytes,
)
from asymspec_vl.toy.tiny import default_corpus, train_tokenizer


@pytest.fixture(scope="module")
def two_bpe():
    """Two byte-level BPE tokenizers trained on different text and sizes: part of their vocabularies shared."""
    corpus = default_corpus()
    return train_tokenizer(corpus, 700), train_tokenizer(
        corpus[::-1][:150] + ["zebra quartz"] * 50, 520, qwen_split=True
    )


def word_level(words, eos="</s>", specials=("</s>", "<pad>")):
    vocab = {w: i for i, w in enumerate(list(specials) + list(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token="<pad>"
    )


def test_one_vocabulary_is_the_identity(two_bpe):
    d, _ = two_bpe
    vmap = build_vocab_map(d, d)
    assert vmap.identity and vmap.size == len(d)
    assert describe(vmap) == f"one vocabulary ({len(d)} tokens)"


def test_shared_tokens_have_the_same_bytes_and_specials_pair_by_role(two_bpe):
    d, v = two_bpe
    vmap = build_vocab_map(d, v)
    db, vb = token_bytes(d), token_bytes(v)
    pairs = dict(zip(vmap.verifier_ids.tolist(), vmap.drafter_ids.tolist()))
    special_v = set(special_names(v).values()) & set(
        pairs
    )  # paired by name (one family's) or role
    for j, i in pairs.items():
        if j not in special_v:
            assert db[i] == vb[j]
    # every string both have is paired (nothing missed), and the map is one-to-one
    both = set(db.values()) & set(vb.values())
    assert len(pairs) - len(special_v) == len(both)
    assert len(set(pairs.values())) == len(pairs)
    assert pairs[v.convert_tokens_to_ids("<|image_pad|>")] == d.convert_tokens_to_ids(
        "<|image_pad|>"
    )
    assert vmap.specials["answer_end"] == (
        d.convert_tokens_to_ids("<|im_end|>"),
        v.convert_tokens_to_ids("<|im_end|>"),
    )
    assert 0 < vmap.size < min(len(d), len(v))
    assert f"{vmap.size} shared tokens" in describe(vmap)
    # digits and words: " the" and "7" are shared
    for s in (" the", "7"):
        assert d.convert_tokens_to_ids(d.tokenize(s))[0] in pairs.values()


def test_sentencepiece_pieces_compare_by_bytes():
    """'▁cat' (SentencePiece) and ' cat' are one string; '<0x0A>' is the newline byte."""
    sp = word_level(["▁cat", "<0x0A>", "dog"])
    assert token_bytes(sp)[2] == b" cat" and token_bytes(sp)[3] == b"\n"


def test_a_small_shared_set_is_a_typed_error_with_the_numbers():
    d = word_level([f"w{i}" for i in range(300)])
    v = word_level([f"w{i}" for i in range(100)] + [f"x{i}" for i in range(300)])
    with pytest.raises(
        VocabularyMismatchError,
        match=r"102 shared tokens, 100 of the verifier's 256 most frequent",
    ):
        build_vocab_map(d, v)


def test_unpairable_end_tokens_are_a_typed_error():
    words = [f"w{i}" for i in range(300)]
    d = word_level(words)
    v = word_level(words, eos=None, specials=("<pad>",))
    with pytest.raises(
        VocabularyMismatchError,
        match="verifier has no chat template and no answer end in the role table",
    ):
        build_vocab_map(d, v)


def test_a_byte_fallback_token_yields_to_the_ordinary_piece_of_the_same_string():
    """Llama-2 and Gemma number their `<0xNN>` byte tokens first: the drafter's `a` pairs with the verifier's own
    piece `a`, not with `<0x61>` (which decodes the same, but which the verifier never writes for `a`)."""
    words = [f"w{i}" for i in range(300)]
    d = word_level(words + ["a"])
    v = word_level(["<0x61>"] + words + ["a"])
    vmap = build_vocab_map(d, v)
    drafter_ids, verifier_ids = vmap.drafter_ids.tolist(), vmap.verifier_ids.tolist()
    a_d, a_v, byte_v = (
        d.convert_tokens_to_ids("a"),
        v.convert_tokens_to_ids("a"),
        v.convert_tokens_to_ids("<0x61>"),
    )
    # read as lists, not a dict: a dict {drafter id: verifier id} would hide a drafter id paired twice
    assert byte_v < a_v and byte_v not in verifier_ids
    assert [j for i, j in zip(drafter_ids, verifier_ids) if i == a_d] == [a_v]
    assert len(set(drafter_ids)) == len(drafter_ids)  # one-to-one
