"""Answer extraction: realistic chain-of-thought responses per answer type (rules), and the LLM path's plumbing."""

import pytest
from asymspec_vl.evals.mathvista.data import load_problems
from asymspec_vl.evals.mathvista.extraction import (
    RuleExtractor,
    extract,
    final_span,
    last_boxed,
    list_in,
    number_in,
    option_letter,
    quick_extract,
)
from asymspec_vl.evals.mathvista.llm_extract import (
    EXAMPLES,
    LLMExtractor,
    extraction_prompt,
    first_line,
)
from asymspec_vl.evals.mathvista.scoring import score


@pytest.fixture(scope="module")
def problems():
    return load_problems()


MC = {
    "question_type": "multi_choice",
    "answer_type": "text",
    "choices": ["30", "45", "60", "90"],
    "answer": "45",
    "precision": None,
}
INT = {
    "question_type": "free_form",
    "answer_type": "integer",
    "choices": None,
    "answer": "5",
    "precision": None,
}
FLOAT = {
    "question_type": "free_form",
    "answer_type": "float",
    "choices": None,
    "answer": "1.2",
    "precision": 1,
}
LIST = {
    "question_type": "free_form",
    "answer_type": "list",
    "choices": None,
    "answer": "[2014, 2016]",
    "precision": None,
}


def test_official_cheap_rules_come_first():
    assert quick_extract("", INT) == ""
    assert quick_extract("45", MC) == "45"
    assert quick_extract(" 7\n", INT) == "7"
    assert quick_extract("1.25", FLOAT) == "1.25"
    assert quick_extract('The answer is "(B) 45".', MC) == "(B) 45"
    assert quick_extract("It is 7.", INT) is None


@pytest.mark.parametrize(
    "response, expected",
    [
        (
            "The angle ABC is inscribed in a semicircle, so it is 90°. Angle A is half of 90°, which is 45°.\n"
            "The final answer is (B).",
            "B",
        ),
        (
            "Since the two base angles are equal, each is (180 - 90) / 2 = 45 degrees.\n\n**Answer:** B) 45",
            "B",
        ),
        (
            "Looking at the figure, (A) 30 is too small and (D) 90 is a right angle.\nSo the angle measures 45.",
            "45",
        ),
        (
            "The triangle is isosceles, so the base angles are equal.\nThe correct option is B",
            "B",
        ),
        ("We have 2x = 90, so x = 45. Therefore, the answer is 45 degrees.", "45"),
        (
            "Step 1: the exterior angle is 120°.\nStep 2: 180 - 120 = 60.\n\\boxed{C}",
            "C",
        ),
    ],
)
def test_multi_choice_chain_of_thought(response, expected):
    assert extract(response, MC) == expected
    assert score(extract(response, MC), MC)[0] == {"B": "45", "C": "60"}.get(
        expected, expected
    )


@pytest.mark.parametrize(
    "response, expected",
    [
        (
            "There are 3 red cubes and 2 blue cubes on the table.\nSo in total there are 3 + 2 = 5 cubes.\n"
            "The final answer is 5.",
            "5",
        ),
        ("Final Answer: The final answer is $\\boxed{5}$", "5"),
        ("Counting the bars above 40: 2019, 2020, 2021, 2022 and 2023.\nTotal: 5", "5"),
        (
            "The chart shows a value of 1,250 in 2020 and 1,255 in 2021, so the difference is 5.",
            "5",
        ),
        ("The temperature dropped from 2 to −3, so the answer is −3.", "-3"),
        ("The answer is 12 cm^2.", "12"),
    ],
)
def test_integer_chain_of_thought(response, expected):
    assert extract(response, INT) == expected


@pytest.mark.parametrize(
    "response, expected",
    [
        (
            "Energy: 1/2 m v^2 = 1/2 k d^2, so d = v * sqrt(m / k) = 0.5 * sqrt(0.4 / 750) = 0.0115 m = 1.2 cm.\n"
            "The final answer is 1.2.",
            "1.2",
        ),
        (
            "The slope is rise over run: \\frac{6}{5}. So the answer is \\frac{6}{5}",
            "1.2",
        ),
        ("Mean = (1.1 + 1.3) / 2 = 1.2", "1.2"),
        ("The ratio is 6/5, giving a final answer of $\\boxed{6/5}$.", "1.2"),
    ],
)
def test_float_chain_of_thought(response, expected):
    found = extract(response, FLOAT)
    assert found == expected or float(found) == float(expected)
    assert score(found, FLOAT) == ("1.2", True)


@pytest.mark.parametrize(
    "response, expected",
    [
        (
            "The line rises from 2012 to 2014, peaks, and falls after 2016.\nSo the final answer is [2014,2016].",
            "[2014, 2016]",
        ),
        (
            "Between 2014 and 2016 the graph is highest. Final answer: [2014, 2016]",
            "[2014, 2016]",
        ),
        (
            "Candidates: [2010, 2012] rises slowly, [2014, 2016] rises fastest.",
            "[2014, 2016]",
        ),
    ],
)
def test_list_chain_of_thought(response, expected):
    assert extract(response, LIST) == expected
    assert score(extract(response, LIST), LIST) == (expected, True)


@pytest.mark.parametrize(
    "boxed, value",
    [
        ("-\\frac{-1}{2}", 0.5),
        ("\\frac{-1}{-2}", 0.5),
        ("-\\frac{1}{-2}", 0.5),
        ("-\\frac{-1}{-2}", -0.5),
        ("-\\frac{1}{2}", -0.5),
        ("\\frac{-1}{2}", -0.5),
        ("\\dfrac{3}{4}", 0.75),
        ("-\\frac{0}{2}", 0.0),
    ],
)
def test_fraction_signs_multiply(boxed, value):
    """The minus before \\frac and the signs inside it multiply (two negatives make a positive)."""
    found = extract(f"So the slope is \\boxed{{{boxed}}}", FLOAT)
    assert float(found) == value and found == str(value)


def test_a_choice_inside_another_choice_gives_the_longer_one():
    colours = {
        "question_type": "multi_choice",
        "answer_type": "text",
        "choices": ["red", "dark red", "blue"],
        "answer": "dark red",
        "precision": None,
    }
    assert (
        extract(
            "The bar for 2020 is coloured dark red.\nThe final answer is dark red.",
            colours,
        )
        == "dark red"
    )
    assert (
        extract("Looking at the legend, the tallest bar is dark red", colours)
        == "dark red"
    )
    assert extract("The final answer is red.", colours) == "red"


def test_nothing_found_gives_empty():
    assert extract("I cannot tell from the description.", INT) == ""
    assert extract("No list here.", LIST) == ""


def test_helpers():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert (
        final_span("Final Answer: The final answer is 7. I hope it is correct.")
        == "7. I hope it is correct"
    )
    assert number_in("x = 3 + 4 = 7") == "7"
    assert number_in("1,234.5 units") == "1234.5"
    assert option_letter("A right angle", 4, strict=True) is None
    assert option_letter("(C)", 4, strict=True) == "C"
    assert option_letter("E", 4) is None
    assert list_in("[1, 'a'] then [1,2,3]") == "[1, 2, 3]"


def test_rule_extraction_on_real_problems(problems):
    p = problems["506"]  # list
    r = "The line graph reaches its maximum between 2014 and 2016. The final answer is [2014, 2016]."
    assert score(RuleExtractor().extract(r, p.facts()), p.facts())[1]
    q = problems["199"]  # float, precision 2
    r = "The shaded share is 21 out of 100 squares, 21 / 100 = 0.21.\nThe final answer is 0.21"
    assert score(RuleExtractor().extract(r, q.facts()), q.facts()) == ("0.21", True)
    m = problems["740"]  # multi-choice with duplicate choices
    r = "Adding the two segments gives 15.\nAnswer: (A)"
    assert score(RuleExtractor().extract(r, m.facts()), m.facts()) == ("15", True)


def test_extraction_prompt_has_five_examples_and_the_query():
    prompt = extraction_prompt(
        "Hint: integer.\nQuestion: How many?", "I count 4 of them."
    )
    assert len(EXAMPLES) == 5
    assert (
        prompt.count("Model response:") == 6 and prompt.count("Extracted answer:") == 6
    )
    assert prompt.endswith(
        "Question: How many?\n\nModel response: I count 4 of them.\n\nExtracted answer:"
    )
    assert {a for _, _, a in EXAMPLES} == {"5", "3.8", "0.38", "B", "[-2, 3]"}
    assert first_line("\n Extracted answer: 42\nmore") == "42"


def test_llm_extraction_plumbing_with_the_tiny_verifier(tiny_vl, problems):
    """Tiny random models extract nonsense: this checks the wiring only (cheap rules, prompt, greedy, fit)."""
    ext = LLMExtractor.from_pipeline(tiny_vl)
    assert (
        ext.model is tiny_vl.backend.verifier
    )  # the verifier is reused, not loaded twice
    ext.max_new_tokens = 6
    p = problems["2"]
    assert (
        ext.extract("1000", p.facts(), p.query) == "1000"
    )  # cheap rule: no generation
    out = ext.extract(
        "The cup holds 1000 grams. The final answer is 1000.", p.facts(), p.query
    )
    assert isinstance(out, str) and "\n" not in out
    assert out == ext.extract(
        "The cup holds 1000 grams. The final answer is 1000.", p.facts(), p.query
    )  # greedy
    long_response = "word " * 6000 + "The final answer is 1000."
    ids = ext.chat_ids(
        p.query, long_response
    )  # cut from the front to fit the tiny 4,096-token context
    assert len(ids) <= 4096 - ext.max_new_tokens
    assert ext.tokenizer.decode(ids).rstrip().endswith("assistant\n<think>\n\n</think>")
    assert "The final answer is 1000." in ext.tokenizer.decode(ids)
