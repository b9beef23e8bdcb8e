"""The verifier's own words (inputs/vocab_report.py): on a small corpus counted by hand, the share of the verifier's
tokens outside the shared set, the most frequent of them, the share that are numbers, the one-line description and
the numbers warning's threshold."""

import pytest

from asymspec_vl.core.errors import InputError
from asymspec_vl.inputs.vocab_map import build_vocab_map
from asymspec_vl.inputs.vocab_report import (
    NUMBERS_WARN_SHARE,
    describe_words,
    is_number,
    numbers_warning,
    verifier_words,
)
from tests.inputs.test_vocab_map import word_level

# The drafter writes digits one by one, the verifier also has '126' and '42' as single tokens (as Llama-3 does).
SHARED = ["the", "cat", "sat", "1", "2", "4", "6"]
CORPUS = ["the cat 126", "126 42 dog", "the 1 2 6", "sat"]


@pytest.fixture(scope="module")
def pair():
    drafter = word_level(SHARED)
    verifier = word_level(SHARED + ["126", "42", "dog"])
    return build_vocab_map(drafter, verifier), verifier


def test_the_report_matches_a_hand_count(pair):
    vmap, tok = pair
    r = verifier_words(vmap, tok, CORPUS)
    # 3 + 3 + 4 + 1 tokens; outside: '126' twice, '42' once, 'dog' once
    assert (r.texts, r.tokens, r.outside, r.outside_numbers) == (4, 11, 4, 3)
    assert r.outside_share == pytest.approx(4 / 11)
    assert r.number_share == pytest.approx(3 / 4)
    assert (r.distinct_outside, r.texts_with_outside, r.texts_with_outside_number) == (
        3,
        2,
        2,
    )
    assert r.texts_number_share == pytest.approx(2 / 4)
    ids = tok.convert_tokens_to_ids
    assert [(t.token_id, t.text, t.count, t.number) for t in r.top] == [
        (ids("126"), "126", 2, True),
        (ids("42"), "42", 1, True),
        (ids("dog"), "dog", 1, False),
    ]
    assert [t.share for t in r.top] == pytest.approx([2 / 11, 1 / 11, 1 / 11])
    assert [t.text for t in verifier_words(vmap, tok, CORPUS, top=1).top] == ["126"]
    assert r.to_dict()["outside_share"] == pytest.approx(4 / 11)


def test_one_vocabulary_has_nothing_outside(pair):
    _, tok = pair
    r = verifier_words(build_vocab_map(tok, tok), tok, CORPUS)
    assert (r.tokens, r.outside, r.top) == (11, 0, ())
    assert describe_words(r, "the corpus") == (
        "the verifier's tokens outside the shared set on the corpus: 0.0% of 11"
    )


def test_the_description_line_names_the_share_and_the_most_frequent(pair):
    vmap, tok = pair
    line = describe_words(verifier_words(vmap, tok, CORPUS), "MathVista")
    assert line == (
        "the verifier's tokens outside the shared set on MathVista: 36.4% of 11 (75% of them numbers; "
        "most frequent: '126', '42', 'dog')"
    )


@pytest.mark.parametrize(
    "text, number",
    [
        ("126", True),
        (" 42", True),
        ("7", True),
        ("1.5", False),
        ("²", False),
        (" ", False),
    ],
)
def test_a_number_is_digits_only(text, number):
    assert is_number(text) is number


def test_the_numbers_warning_starts_at_its_threshold(pair):
    vmap, tok = pair
    # 1 of 100 answers holds '126': exactly the threshold
    at = ["126"] + ["the cat"] * (round(1 / NUMBERS_WARN_SHARE) - 1)
    note = numbers_warning(verifier_words(vmap, tok, at), "MathVista")
    assert note is not None and note.startswith(
        "1 of MathVista's 100 answers (1.0%) hold a number the verifier writes as a token outside the shared "
        "set ('126', ...): across this map"
    )
    assert "digit by digit" in note and "asymspec-vl vocab-report" in note
    unlisted = numbers_warning(verifier_words(vmap, tok, at, top=0), "MathVista")
    assert "shared set: across this map" in unlisted  # no top tokens: none named
    below = at + ["sat"]  # 1 of 101
    assert numbers_warning(verifier_words(vmap, tok, below), "MathVista") is None
    # words outside the shared set are no numbers: no warning
    assert numbers_warning(verifier_words(vmap, tok, ["dog"] * 5), "MathVista") is None


def test_a_corpus_that_is_no_list_of_texts_is_a_typed_error(pair):
    vmap, tok = pair
    with pytest.raises(InputError, match="a corpus is a list of texts; it holds int"):
        verifier_words(vmap, tok, ["the", 126])


# Counted by hand from each tokenizer's pieces: Llama-3 cuts digits into groups of up to three ('202' '3', '234'),
# Tekken and SentencePiece v3 into single digits, as Qwen does.
REAL_TEXTS = ["The answer is 126.", "In 2023, 1,234 apples cost $5."]
REAL_COUNTS = {
    # family: (tokens, outside, outside numbers, outside tokens)
    "llama3": (20, 3, 3, {"126", "202", "234"}),
    "mistral-tekken": (26, 0, 0, set()),
    "mistral-sp": (27, 1, 0, {"ples"}),  # '▁ap' 'ples': Qwen has no 'ples'
}


@pytest.mark.parametrize("family", REAL_COUNTS)
def test_real_verifiers_against_qwen_count_as_by_hand(real_shapes, family):
    qwen, tok = real_shapes.tokenizer("qwen3"), real_shapes.tokenizer(family)
    r = verifier_words(build_vocab_map(qwen, tok), tok, REAL_TEXTS)
    tokens, outside, numbers, listed = REAL_COUNTS[family]
    assert (r.tokens, r.outside, r.outside_numbers) == (tokens, outside, numbers)
    assert {t.text for t in r.top} == listed and all(t.count == 1 for t in r.top)
    assert r.texts_with_outside_number == (2 if family == "llama3" else 0)
