"""MathVista scoring follows the official rules on the tricky cases (real testmini problems where they exist)."""

import pytest
from asymspec_vl.evals.mathvista.data import load_problems
from asymspec_vl.evals.mathvista.scoring import (
    breakdown,
    levenshtein,
    most_similar,
    normalize_extraction,
    score,
)


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def mc(choices, answer):
    return {
        "question_type": "multi_choice",
        "answer_type": "text",
        "choices": choices,
        "answer": answer,
        "precision": None,
    }


def free(answer_type, answer, precision=None):
    return {
        "question_type": "free_form",
        "answer_type": answer_type,
        "choices": None,
        "answer": answer,
        "precision": precision,
    }


def test_levenshtein_by_hand():
    assert levenshtein("", "") == 0
    assert levenshtein("abc", "") == 3 and levenshtein("", "ab") == 2
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert levenshtein("forty-five", "fourty-five") == 1
    assert levenshtein("ab", "ba") == 2  # no transpositions in plain Levenshtein


def test_letter_in_parentheses_is_taken_first_and_upper_cased():
    f = mc(["30", "45", "60", "90"], "45")
    assert score("(B) 45", f) == ("45", True)
    assert score("(b)", f) == ("45", True)
    assert score("I think it is (C), not (B)", f) == (
        "60",
        False,
    )  # the first "(x)" wins
    assert score("B", f) == ("45", True)
    assert score(" B ", f) == ("45", True)  # stripped
    assert (
        score("b", f)[0] == "30"
    )  # a bare lower-case letter is no option letter: nearest choice text


def test_letter_beyond_the_choices_goes_to_the_nearest_choice():
    f = mc(["30", "45", "60", "90"], "45")
    assert (
        normalize_extraction("E", f["choices"], "multi_choice", "text", None) == "30"
    )  # all at distance 2
    assert (
        normalize_extraction("(E)", f["choices"], "multi_choice", "text", None) == "30"
    )


def test_choice_text_with_a_typo_maps_to_the_nearest_choice():
    f = mc(["thirty", "forty-five", "sixty"], "forty-five")
    assert score("fourty-five", f) == ("forty-five", True)
    assert score("Sixty", f) == ("sixty", False)
    assert most_similar("ab", ["aa", "bb"]) == "aa"  # ties: the first choice


def test_empty_and_missing_extractions(problems):
    # multi_choice: "" is nearest to the shortest choice (its length), the first among equals
    assert (
        normalize_extraction("", ["abc", "de", "fg"], "multi_choice", "text", None)
        == "de"
    )
    assert (
        normalize_extraction(None, ["None!", "x"], "multi_choice", "text", None)
        == "None!"
    )  # str(None)
    for answer_type, precision in (("integer", None), ("float", 1)):
        assert (
            normalize_extraction("", None, "free_form", answer_type, precision) is None
        )
        assert score("", free(answer_type, "3", precision)) == (None, False)
    assert score("", free("list", "[1, 2]")) == ("", False)
    p = problems[
        "5"
    ]  # multi_choice whose shortest choice is the answer: an empty extraction scores
    assert p.question_type == "multi_choice" and min(p.choices, key=len) == p.answer
    assert score("", p.facts()) == (p.answer, True)


def test_integer_answers():
    f = free("integer", "5")
    assert score("5.0", f) == ("5", True)
    assert score("5", f) == ("5", True)
    assert score(" 5 ", f) == ("5", True)
    assert score("5.7", f) == (
        "5",
        True,
    )  # int(float()) truncates, as the official script does
    assert score("1e1", free("integer", "10")) == ("10", True)
    assert score("-0.0", free("integer", "0")) == ("0", True)
    assert score("five", f) == (None, False)
    assert score("inf", f) == (None, False)
    assert score("1,000", free("integer", "1000")) == (
        None,
        False,
    )  # float("1,000") fails: wrong


def test_float_answers_round_at_the_problem_precision(problems):
    p = problems["199"]
    assert (p.answer, p.precision) == ("0.21", 2)
    assert score("0.21", p.facts()) == ("0.21", True)
    assert score("0.2099", p.facts()) == ("0.21", True)
    assert score("0.214", p.facts()) == ("0.21", True)
    assert score("0.2", p.facts()) == ("0.2", False)
    assert score("0.375", free("float", "0.38", 2)) == (
        "0.38",
        True,
    )  # 0.375 is exact: half to even
    assert score("2.675", free("float", "2.68", 2)) == (
        "2.67",
        False,
    )  # binary 2.67499...: official quirk
    assert score("1.50", free("float", "1.5", 2)) == ("1.5", True)
    q = problems["420"]
    assert (q.answer, q.precision) == ("0.0", 1)
    assert score("0", q.facts()) == ("0.0", True)
    assert score("-4.25", free("float", "-4.2", 1)) == ("-4.2", True)
    assert score("abc", free("float", "1.2", 1)) == (None, False)


def test_list_answers_compare_as_raw_strings(problems):
    p = problems["506"]
    assert (p.answer_type, p.answer) == ("list", "[2014, 2016]")
    assert score("[2014, 2016]", p.facts()) == ("[2014, 2016]", True)
    assert (
        score("[2014,2016]", p.facts())[1] is False
    )  # no list normalization in the official rules
    assert score("2014, 2016", p.facts())[1] is False


def test_duplicate_choices(problems):
    p = problems["740"]
    assert p.choices == ["15", "100", "50", "50"] and p.answer == "15"
    assert score("A", p.facts()) == ("15", True)
    assert score("D", p.facts()) == ("50", False)
    assert score("50", p.facts()) == ("50", False)
    q = problems["587"]
    assert q.choices[0] == q.choices[3] and q.answer == q.choices[1]
    assert score("B", q.facts()) == (q.answer, True)
    assert score("D", q.facts()) == (
        q.choices[0],
        False,
    )  # a letter picks its own position


def test_choices_that_look_like_letters_follow_the_official_quirk(problems):
    p = problems["168"]  # choices are "(c)", "(a)", ... and the answer text is "(b)"
    assert p.choices == ["(c)", "(a)", "(e)", "(d)", "(b)"] and p.answer == "(b)"
    assert score("(b)", p.facts()) == (
        "(a)",
        False,
    )  # "(b)" -> letter B -> the 2nd choice
    assert score("E", p.facts()) == ("(b)", True)


def test_every_answer_and_its_letter_score_correct_on_testmini(problems):
    quirks = {"168", "849"}  # the answer text is itself "(x)": see the test above
    for p in problems.values():
        assert score(p.answer, p.facts())[1] is (p.pid not in quirks), p.pid
        if p.choices:
            letter = chr(ord("A") + p.choices.index(p.answer))
            assert score(letter, p.facts())[1], p.pid


def test_breakdown_counts_multi_label_skills():
    recs = [
        {
            "correct": True,
            "question_type": "free_form",
            "answer_type": "integer",
            "metadata": {
                "task": "geometry problem solving",
                "skills": ["algebraic reasoning", "arithmetic reasoning"],
            },
        },
        {
            "correct": False,
            "question_type": "free_form",
            "answer_type": "integer",
            "metadata": {
                "task": "geometry problem solving",
                "skills": ["arithmetic reasoning"],
            },
        },
    ]
    b = breakdown(recs)
    assert b["average"] == {"accuracy": 0.5, "correct": 1, "total": 2}
    assert b["skills"]["algebraic reasoning"] == {
        "accuracy": 1.0,
        "correct": 1,
        "total": 1,
    }
    assert b["skills"]["arithmetic reasoning"] == {
        "accuracy": 0.5,
        "correct": 1,
        "total": 2,
    }
    assert b["task"]["geometry problem solving"]["total"] == 2
