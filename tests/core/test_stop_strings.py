"""Stop strings (core/stop_strings.py) against vLLM's own detokenizer (vllm/v1/engine/detokenizer.py, the
FastIncrementalDetokenizer a vLLM server runs) as the oracle: random answers of the embedded pair's tokenizer
(with characters split over byte-level tokens), random steps, stop sets (pieces of the answer, overlapping ones,
ones split over tokens, strings not in it), min_tokens and include_stop_str_in_output. The loop's cut (StopStrings)
equals vLLM's final text, and the streamed pieces (StreamedText, steps merged at random as a slow consumer sees
them) join to it without ever carrying text the stop cut."""

from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stop_oracle import vllm_final

from asymspec_vl.core.stop_strings import StopStrings, StreamedText

ANSWERS = [
    "9 × 14 = 126. The answer is 126.",
    "答案 é ✓ 12 + 3 = 15. END of it",
    "aaaa abab 1212 26 126 ×× .",
]


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from asymspec_vl.pair.defaults import embedded_models

    return AutoTokenizer.from_pretrained(embedded_models()["verifier"])


def ours(
    tok, ids, steps, stop, include, min_tokens, merged
) -> tuple[str, list[str], bool]:
    """(final text as the loop cuts it, the pieces a stream sends seeing only the steps in `merged`, stopped)."""
    decode = partial(tok.decode, skip_special_tokens=True)
    watch, before, end = (
        StopStrings(decode, tuple(stop), include, min_tokens),
        0,
        len(ids),
    )
    for n in steps:
        if watch.after_step(ids[:n], before):
            end = n
            break
        before = n
    final = watch.text if watch.text is not None else decode(ids[:end])
    text = StreamedText(decode, tuple(stop), include, min_tokens)
    pieces = [text.push(ids[:n]) for n in steps if n <= end and n in merged] + [
        text.end(final)
    ]
    return final, pieces, watch.text is not None


@st.composite
def cases(draw):
    answer = draw(st.sampled_from(ANSWERS))
    n = len(answer)
    stops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.integers(0, n - 1), st.integers(1, 12)).map(
                    lambda t: answer[t[0] : t[0] + t[1]]
                ),
                st.text(alphabet="126 ×.aTbE", min_size=1, max_size=4),
            ),
            min_size=0,
            max_size=4,
        )
    )
    cuts = draw(st.lists(st.integers(1, 40), max_size=12))
    return (
        answer,
        [s for s in stops if s],
        cuts,
        draw(st.booleans()),
        draw(st.integers(0, 14)),
        draw(st.sets(st.integers(1, 40))),
    )


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=cases())
def test_the_cut_and_the_streamed_pieces_are_vllms(tok, case):
    answer, stop, cuts, include, min_tokens, merged = case
    ids = tok.encode(answer)
    steps = sorted({c for c in cuts if c < len(ids)} | {len(ids)})
    want, vllm_streamed, vllm_stopped = vllm_final(
        tok, ids, steps, stop, include, min_tokens
    )
    final, pieces, stopped = ours(
        tok, ids, steps, stop, include, min_tokens, merged | {steps[-1]}
    )
    assert (final, stopped) == (want, vllm_stopped)
    assert vllm_streamed == want  # the oracle's own rule
    assert "".join(pieces) == final
    assert not any("\ufffd" in p for p in pieces)


def test_a_stop_in_the_first_min_tokens_tokens_text_is_not_searched(tok):
    decode = partial(tok.decode, skip_special_tokens=True)
    answer = "9 × 14 = 126. The answer is 126."
    ids = tok.encode(answer)
    k = next(
        n for n in range(len(ids)) if "The" in decode(ids[:n])
    )  # the tokens up to "The"
    one_by_one = list(range(1, len(ids) + 1))
    for min_tokens, want in (
        (0, "9 "),
        (k, answer),
    ):  # "×" and "The" lie inside the first k tokens' text
        watch = StopStrings(decode, ("×", "The"), False, min_tokens)
        stopped = any(watch.after_step(ids[:n], n - 1) for n in one_by_one)
        assert (watch.text if stopped else decode(ids)) == want
        assert (
            vllm_final(tok, ids, one_by_one, ("×", "The"), False, min_tokens)[0] == want
        )


def test_overlapping_stops_the_first_listed_found_in_the_step_wins_as_in_vllm(tok):
    decode = partial(tok.decode, skip_special_tokens=True)
    ids = tok.encode("9 × 14 = 126")
    for stop in (("26", "12"), ("12", "26")):
        want = vllm_final(tok, ids, [len(ids)], stop, False, 0)[0]
        watch = StopStrings(decode, stop, False, 0)
        assert watch.after_step(ids, 0) and watch.text == want
    assert StopStrings(decode, ("26", "12"), False, 0).after_step(ids, 0)


def test_a_stop_covering_the_whole_answer_sends_nothing_before_the_end(tok):
    decode = partial(tok.decode, skip_special_tokens=True)
    answer = "9 × 14 = 126. The answer"
    ids = tok.encode(answer)
    text = StreamedText(decode, (answer, "zz"), False, 0)
    assert [text.push(ids[:n]) for n in range(1, len(ids) + 1)] == [""] * len(ids)
    assert text.end("") == ""
