"""`asymspec-vl vocab-report` (evals/verifier_words.py): a pair's folders read without weights, a corpus file (text
or JSON lines) counted by hand, MathVista's text by default, one JSON object with --json, and bad corpora as one
error line naming the file and line."""

import json

import pytest
from asymspec_vl.evals.mathvista import corpus as mathvista_corpus
from asymspec_vl.evals.verifier_words import read_corpus
from transformers import LlamaConfig

from asymspec_vl.cli import main
from tests.inputs.test_vocab_map import word_level

SHARED = ["the", "cat", "sat", "1", "2", "4", "6"]
CORPUS = ["the cat 126", "126 42 dog", "the 1 2 6", "sat"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A drafter and a verifier folder (config and tokenizer, no weights): the verifier writes '126' and '42' as
    single tokens, the drafter only digits."""
    root = tmp_path_factory.mktemp("words-pair")
    out = {}
    for role, words in (
        ("drafter", SHARED),
        ("verifier", SHARED + ["126", "42", "dog"]),
    ):
        tok = word_level(words)
        # each turn closed by </s>: the preflight wants a template with an answer end
        tok.chat_template = "{% for m in messages %}{{ m['content'] }}</s>{% endfor %}"
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=8,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            eos_token_id=tok.eos_token_id,
        ).save_pretrained(root / role)
        tok.save_pretrained(root / role)
        out[role] = str(root / role)
    return out


def report(capsys, *argv):
    assert main(["vocab-report", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_corpus_file_is_counted_as_by_hand(folders, tmp_path, capsys):
    (tmp_path / "c.txt").write_text("\n".join(CORPUS) + "\n\n")
    pair = ["--drafter", folders["drafter"], "--verifier", folders["verifier"]]
    got = report(capsys, *pair, "--corpus", str(tmp_path / "c.txt"))
    r = got["report"]
    assert (r["texts"], r["tokens"], r["outside"], r["outside_numbers"]) == (
        4,
        11,
        4,
        3,
    )
    assert [(t["text"], t["count"], t["number"]) for t in r["top"]] == [
        ("126", 2, True),
        ("42", 1, True),
        ("dog", 1, False),
    ]
    assert got["map"].startswith("9 shared tokens") and got["parts"] == {}
    assert got["warning"] is None  # a warning needs answers: MathVista's corpus

    assert main(["vocab-report", *pair, "--corpus", str(tmp_path / "c.txt")]) == 0
    text = capsys.readouterr().out
    assert (
        "the verifier's tokens outside the shared set on "
        + str(tmp_path / "c.txt")
        + ": 36.4% of 11 (75% of them numbers; most frequent: '126', '42', 'dog')"
    ) in text
    assert "the 3 most frequent outside the shared set:" in text
    assert [line.split()[:4] for line in text.splitlines()[-3:]] == [
        ["'126'", "9", "2", "18.18%"],
        ["'42'", "10", "1", "9.09%"],
        ["'dog'", "11", "1", "9.09%"],
    ]


def test_json_lines_by_field_and_top(folders, tmp_path, capsys):
    lines = [json.dumps({"q": t}) for t in CORPUS[:2]] + [json.dumps("sat")]
    (tmp_path / "c.jsonl").write_text("\n".join(lines))
    got = report(
        capsys,
        "--drafter",
        folders["drafter"],
        "--verifier",
        folders["verifier"],
        "--corpus",
        str(tmp_path / "c.jsonl"),
        "--field",
        "q",
        "--top",
        "1",
    )["report"]
    assert (got["texts"], got["tokens"], got["outside"]) == (3, 7, 4)
    assert [t["text"] for t in got["top"]] == ["126"]


def test_the_default_corpus_is_mathvistas_text_with_its_parts(capsys):
    got = report(capsys, "--verifier", "embedded-llama", "--top", "3")
    parts = mathvista_corpus.texts()
    assert got["corpus"] == "MathVista testmini's text"
    assert {k: v["texts"] for k, v in got["parts"].items()} == {
        k: len(v) for k, v in parts.items()
    }
    assert got["report"]["tokens"] == sum(p["tokens"] for p in got["parts"].values())
    assert got["report"]["outside"] == sum(p["outside"] for p in got["parts"].values())
    assert len(got["report"]["top"]) == 3
    # the toy Llama verifier writes digits one by one, as the drafter does: no number outside, no warning
    assert got["parts"]["answers"]["outside_numbers"] == 0 and got["warning"] is None


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("missing.txt", None, "missing.txt: no such file"),
        (
            "bad.jsonl",
            '"ok"\n{"text": 3}\n',
            "bad.jsonl, line 2: expected a string or an object whose 'text'",
        ),
        ("bad2.jsonl", "not json\n", "bad2.jsonl, line 1: not JSON"),
        ("latin.txt", b"caf\xe9", "cannot be read as UTF-8 text"),
    ],
)
def test_a_bad_corpus_is_one_error_line(tmp_path, capsys, name, text, words):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    assert (
        main(["vocab-report", "--verifier", "embedded-llama", "--corpus", str(path)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("asymspec-vl: error: --corpus ") and words in err
    assert len(err.strip().splitlines()) == 1


def test_read_corpus_skips_blank_lines(tmp_path):
    (tmp_path / "c.txt").write_text("a b\n\n  \nc\n")
    assert read_corpus(tmp_path / "c.txt") == ["a b", "c"]
