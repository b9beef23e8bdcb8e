"""`eval toy`'s line on a cross-family verifier's own words (evals/toy/cli.py, words_line): the held-out answers,
which the toy Llama verifier writes in shared tokens only; none for one vocabulary."""

from types import SimpleNamespace

from asymspec_vl.evals.toy.cli import words_line

from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.pair.model_pair import ModelPair
from asymspec_vl.toy import world


def pair(name):
    paths = embedded_models(name)
    return SimpleNamespace(pair=ModelPair.load(paths["drafter"], paths["verifier"]))


def test_the_cross_family_line_counts_the_held_out_answers():
    examples = world.heldout(30)
    vl = pair("embedded-llama")
    tokens = sum(
        len(vl.pair.tokenizer(e.answer, add_special_tokens=False)["input_ids"])
        for e in examples
    )
    assert words_line(vl, examples) == (
        "cross-family: the verifier's tokens outside the shared set on the held-out answers: "
        f"0.0% of {tokens:,}"
    )
    assert words_line(pair("embedded"), examples) is None
