"""The release protocol (the authors' harness behind Table 3): every branch of its extraction and scoring on
hand-written responses, its verifier text and OCR join on real problems of the shipped data, and the two
protocols' verdicts side by side."""

import pytest
from asymspec_vl.evals.mathvista import release
from asymspec_vl.evals.mathvista.extraction import RuleExtractor
from asymspec_vl.evals.mathvista.protocol import COT_SUFFIX, EvalProtocol, build_request
from asymspec_vl.evals.mathvista.verdicts import headline, kept, label, verdicts
from PIL import Image

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.inputs.prompts import build_prompts
from tests.evals.mathvista.test_data import official, problems  # noqa: F401 (fixtures: the shipped data)

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


@pytest.mark.parametrize(
    "response, anchor",
    [
        # the last \boxed{} whose content has no braces
        ("First \\boxed{3}, then corrected: \\boxed{4}. Final answer: 9", "4"),
        (
            "\\boxed{\\frac{1}{2}} so the final answer: 7",
            "7",
        ),  # a boxed with braces inside does not count
        # the FIRST "final answer", optional ":" or "-", "**" dropped, the line cut at "*", a trailing "." removed
        ("Final answer: 12.\nThe final answer is 13", "12"),
        (
            "**Final Answer** - **B**",
            "-",
        ),  # the "-" is not the optional one: "**" comes first
        ("The final answer:\n  42 cm.", "42 cm"),
        ("final answer is 7 **and more**", "is 7"),
        # "answer is X" / "answer: X" at the end of a line (the first such line)
        ("Step one.\nSo the answer is **(C) 60**\nAnd more text.", "(C) 60"),
        ("So the answer is 60.\nAnd more text.", "60"),
        (
            "The answer is **7**.\nDone",
            "Done",
        ),  # "." after the closing "**": not at the end of the line
        ("Answer: 5\nThe answer is 6", "5"),
        # else the last non-empty line
        ("We count the bars.\nThere are 7 of them.\n\n  ", "There are 7 of them."),
        ("", ""),
    ],
)
def test_anchor_branches(response, anchor):
    assert release.anchor(response.strip()) == anchor


@pytest.mark.parametrize(
    "response, extraction",
    [
        (
            "The angles sum to 180.\nFinal answer: B",
            "B",
        ),  # a standalone letter in the anchor
        (
            "A triangle has angles... the answer is 45",
            "B",
        ),  # no letter in "45": the choice whose text begins it
        (
            "Final answer: 45 degrees",
            "B",
        ),  # normalised anchor "45degrees" starts with "45"
        (
            "Option (D) looks wrong, (C) too.\nThe answer is ninety",
            "C",
        ),  # the last standalone A-F of the response
        (
            "I cannot decide between the two angles here",
            "I cannot decide betw",
        ),  # the anchor's first 20 characters
        (
            "Final answer: a right angle",
            "a right angle",
        ),  # lower-case letters are not options
    ],
)
def test_multi_choice_branches(response, extraction):
    assert release.extract(response, MC) == extraction


@pytest.mark.parametrize(
    "facts, response, extraction",
    [
        (INT, "3 + 2 = 5.0 apples.\nThe final answer is 5.0", "5"),  # whole -> integer
        (INT, "Final answer: -3 and -7", "-7"),  # the last number of the anchor
        (FLOAT, "The ratio is 6/5 = 1.20\nFinal answer: 1.20", "1.2"),  # %g
        (FLOAT, "The answer is 0.1234567", "0.123457"),  # %g: six significant digits
        (
            INT,
            "\\boxed{x} since 4 + 1\nso 5 in all",
            "5",
        ),  # no number in the anchor: the last line's
        (
            INT,
            "It is 5 or 6\nAnswer: none",
            "6",
        ),  # nor in the last line: the response's last number
        (
            INT,
            "I cannot read the chart's values from the caption at all",
            "I cannot read the chart's valu",
        ),
    ],
)
def test_free_form_branches(facts, response, extraction):
    assert release.extract(response, facts) == extraction


def test_normalise_and_score():
    assert (
        release.normalise("  12 .5 °. ") == "12.5"
        and release.normalise("Yes.") == "yes"
    )
    assert release.score("b", MC) == ("B", True)  # the gold choice "45" is option B
    assert release.score("45", MC) == (
        "45",
        False,
    )  # the text of the right choice is not its letter
    no_gold = dict(
        MC, answer="50"
    )  # the gold answer is not among the choices: compare normalised texts
    assert release.score(" 50. ", no_gold) == ("50", True)
    assert release.score("1.20", FLOAT) == (
        "1.20",
        False,
    )  # no rounding to the precision
    assert release.score("1.2", FLOAT) == ("1.2", True)
    assert release.score("15 °", dict(INT, answer="15")) == ("15", True)


def test_verdicts_of_both_protocols_differ_where_their_rules_do():
    response = "Each base angle is (180 - 90) / 2 = 45.\nThe final answer is 45."
    both = verdicts(response, FLOAT | {"answer": "45.0"}, "", RuleExtractor())
    assert both["official"] == {
        "extraction": "45",
        "extractor": "rule",
        "prediction": "45.0",
        "correct": True,
    }
    assert both["release"] == {
        "extraction": "45",
        "extractor": "release-rules",
        "prediction": "45",
        "correct": False,
    }  # "45" != "45.0" as text
    rec = {
        "response": response,
        **FLOAT,
        "answer": "45.0",
        "protocol": "release",
        **headline(both, "release"),
    }
    assert (
        rec["correct"] is False
        and rec["scored_by"] == "release"
        and rec["verdicts"] == both
    )
    assert kept(rec) == both  # re-normalised from the stored extractions
    old = {
        k: v for k, v in rec.items() if k not in ("verdicts", "scored_by", "protocol")
    } | {
        "extraction": "45",
        "extractor": "rule",
    }  # a record from before protocols existed
    assert kept(old) == both
    assert (
        label([rec, {"protocol": "official"}])
        == "prompts: official + release, scoring: official + release"
    )


def test_release_requests_of_real_problems(problems, official, tiny_vl):
    """pid 250: two OCR entries whose stored order differs from reading order; pid 352: an empty OCR entry
    (two spaces); pid 3: no OCR text (no OCR line)."""
    protocol = EvalProtocol(name="release")
    image = Image.new("RGB", (64, 64))
    ask = "\n" + COT_SUFFIX
    for pid, ocr in (
        ("250", "X Cm 180="),
        ("352", "Bus Electric asu Hybrid  Deadnnla"),
        ("3", None),
    ):
        p = problems[pid]
        caption = official.captions[pid]
        assert len(caption) < 1600 and (
            ocr is None or official.describe(key=pid).ocr != ocr
        )
        expected = (
            f"Image caption: {caption}\n\n"
            + (f"OCR text from image: {ocr}\n\n" if ocr else "")
            + p.query
            + ask
        )
        req = build_request(p, "asymspec", image, official, protocol)
        assert (req.question, req.caption, req.ocr, req.image) == (
            expected,
            "",
            "",
            image,
        )
        prompts = build_prompts(req, tiny_vl.pair.processor, tiny_vl.pair.tokenizer)
        assert (
            expected in prompts.x_comp
            and expected in prompts.x_full
            and "<|image_pad|>" in prompts.x_full
        )
        floor = build_request(p, "floor", None, official, protocol)
        assert floor.question == expected and floor.image is None
        assert (
            build_prompts(floor, tiny_vl.pair.processor, tiny_vl.pair.tokenizer).x_comp
            == prompts.x_comp
        )
        alone = build_request(p, "drafter", image, official, protocol)
        assert (alone.question, alone.image) == (
            p.query + ask,
            image,
        )  # image + query, as in the official one


def test_release_cuts_the_caption_and_ocr_unstripped(problems, official):
    p = next(
        q
        for q in problems.values()
        if len(official.captions.get(q.pid, "")) > 1600
        and len(release.ocr_join(official.ocr[q.pid])) > 800
    )
    text = build_request(
        p, "floor", None, official, EvalProtocol(name="release")
    ).question
    caption = official.captions[p.pid][:1600]
    ocr = release.ocr_join(official.ocr[p.pid])[:800]
    assert (
        text
        == f"Image caption: {caption}\n\nOCR text from image: {ocr}\n\n{p.query}\n{COT_SUFFIX}"
    )
    assert release.ocr_join("plain OCR text") == "plain OCR text"
    with pytest.raises(ConfigError, match="unknown MathVista protocol 'paper'"):
        EvalProtocol(name="paper")


def test_final_answer_is_tried_before_answer_is():
    assert release.anchor("The answer is 5.\nFinal answer: 7") == "7"
    assert release.anchor("Final answer: 7\nSo the answer is 5.") == "7"


@pytest.mark.parametrize("ocr", ["", "   ", "\n\t "])
def test_blank_ocr_text_gets_no_ocr_line(ocr):
    assert release.user_text("A chart.", ocr, "Q?") == "Image caption: A chart.\n\nQ?"
    assert "OCR text from image:  x " in release.user_text(
        "A chart.", " x ", "Q?"
    )  # kept unstripped


def test_kept_uses_the_stored_release_extraction_not_a_new_one():
    from asymspec_vl.evals.mathvista.verdicts import kept

    rec = {
        "response": "The answer is 12.",
        "question_type": "free_form",
        "answer_type": "integer",
        "answer": "7",
        "precision": None,
        "choices": None,
        "verdicts": {
            "official": {"extraction": "12", "extractor": "rule"},
            "release": {"extraction": "7", "extractor": release.EXTRACTOR},
        },
    }
    assert (
        release.extract(rec["response"], rec) == "12"
    )  # what a new extraction would say
    assert kept(rec)["release"] == {
        "extraction": "7",
        "extractor": release.EXTRACTOR,
        "prediction": "7",
        "correct": True,
    }
