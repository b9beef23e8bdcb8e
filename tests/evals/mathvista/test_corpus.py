"""MathVista's text as a corpus (evals/mathvista/corpus.py): the files `eval mathvista` reads, and the warning a
cross-family pair gets, once, when its verifier writes the selected answers' numbers outside the shared set."""

from types import SimpleNamespace

from asymspec_vl.evals.mathvista.corpus import texts, warn_numbers
from asymspec_vl.evals.mathvista.data import (
    Problem,
    data_files,
    load_problems,
    read_json,
)

from asymspec_vl.inputs.vocab_map import build_vocab_map
from tests.inputs.test_vocab_map import word_level

SHARED = ["the", "cat", "sat", "1", "2", "4", "6"]


def test_the_corpus_is_the_evals_own_text():
    problems = load_problems()
    captions = read_json(data_files()["captions"])["texts"]
    got = texts()
    assert got["queries"] == [p.query for p in problems.values()]
    assert got["answers"] == [p.answer for p in problems.values()]
    assert len(got["answers"]) == 1000
    assert got["captions"] == [captions[p] for p in problems if captions.get(p)]
    assert len(got["captions"]) == 930


def problem(pid, answer):
    return Problem(pid, "q", "q", answer, "free_form", "integer")


def test_a_cross_family_pair_is_warned_once_on_stderr(capsys):
    verifier = word_level(SHARED + ["126", "42"])
    pair = SimpleNamespace(
        vmap=build_vocab_map(word_level(SHARED), verifier), tokenizer=verifier
    )
    note = warn_numbers(
        pair, [problem("1", "126"), problem("2", "1"), problem("3", "42")]
    )
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and note in err
    assert note.startswith(
        "2 of MathVista testmini's 3 answers (66.7%) hold a number the verifier writes as a token outside the "
        "shared set ('126', '42', ...)"
    )
    # answers in shared tokens only, and one vocabulary: nothing said
    assert warn_numbers(pair, [problem("2", "1 2")]) is None
    same = SimpleNamespace(vmap=build_vocab_map(verifier, verifier), tokenizer=verifier)
    assert warn_numbers(same, [problem("1", "126")]) is None
    assert capsys.readouterr().err == ""


def test_eval_mathvista_warns_once_when_loading_qwen_with_llama3(
    real_shapes, tmp_path, capsys
):
    """The real Qwen3-VL x Llama-3 shapes (random weights): pid 2's answer 1000 is Llama-3's '100' '0', pid 8's 'Yes'
    a shared word; the Floor reads no image."""
    from asymspec_vl.cli import main

    drafter, verifier = real_shapes.pair("real-llama3")
    argv = ["eval", "mathvista", "--methods", "floor", "--pids", "2,8"]
    argv += ["--drafter", str(drafter), "--verifier", str(verifier), "--device", "cpu"]
    argv += ["--max-new-tokens", "2", "--no-progress", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert (
        "warning: 1 of MathVista testmini's 2 answers (50.0%) hold a number the verifier writes as a token "
        "outside the shared set ('100', ...)"
    ) in err
