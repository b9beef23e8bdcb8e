"""evals/cli.py through `asymspec-vl eval score` (cli.main, in process): the saved records reach their benchmark's
scorer (here recording stand-ins for mathvista's and toy's rescore) labelled and ordered as the runs listed them,
with the output folder each gets; unusable files are one error line naming the file (rc 2)."""

import json

import pytest
from asymspec_vl.evals import cli as eval_cli
from asymspec_vl.evals.mathvista import cli as mathvista_cli
from asymspec_vl.evals.toy import cli as toy_eval_cli

from asymspec_vl.cli import build_parser, main

MATHVISTA = dict(
    benchmark="mathvista",
    question="q",
    answer="1",
    question_type="free_form",
    answer_type="integer",
)


def record(method, id="1", benchmark="toy", **extra):
    base = MATHVISTA if benchmark == "mathvista" else {"benchmark": benchmark}
    return {
        "id": id,
        "method": method,
        **base,
        "correct": None,
        "stats": {"emitted": 3},
        **extra,
    }


def write(path, records, methods=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    if methods is not None:
        (path.parent / "manifest.json").write_text(json.dumps({"methods": methods}))
    return path


@pytest.fixture
def scorers(monkeypatch):
    """Each benchmark's rescore replaced by a recorder: -> {benchmark: [(records, methods, out, sources), ...]}."""
    calls = {"mathvista": [], "toy": []}
    for name, module in (("mathvista", mathvista_cli), ("toy", toy_eval_cli)):

        def rescore(records, args, methods, out, sources, name=name):
            calls[name].append((records, methods, out, sources))
            return f"table of {name}"

        monkeypatch.setattr(module, "rescore", rescore)
    return calls


def test_eval_registers_each_eval_and_score():
    parser = build_parser()
    assert parser.parse_args(["eval", "toy"]).eval_command == "toy"
    assert parser.parse_args(["eval", "mathvista"]).eval_command == "mathvista"
    args = parser.parse_args(
        ["eval", "score", "a.jsonl", "b.jsonl", "--extract", "keep"]
    )
    assert (args.results, args.out, args.extract) == (
        ["a.jsonl", "b.jsonl"],
        None,
        "keep",
    )
    assert eval_cli.EVAL_MODULES == [
        "asymspec_vl.evals.mathvista.cli",
        "asymspec_vl.evals.toy.cli",
    ]


def test_one_run_is_scored_in_its_manifests_method_order(scorers, tmp_path, capsys):
    records = [
        record("sd"),
        record("floor"),
        record("asymspec"),
        record("floor", id="2"),
    ]
    path = write(
        tmp_path / "run" / "results.jsonl",
        records,
        methods=["floor", "asymspec", "gone", "sd"],
    )
    assert main(["eval", "score", str(path)]) == 0
    [(got, methods, out, sources)] = scorers["toy"]
    assert got == records and methods == [
        "floor",
        "asymspec",
        "sd",
    ]  # "gone": not in the results
    assert (out, sources) == (None, [path]) and scorers["mathvista"] == []
    assert capsys.readouterr().out == "table of toy\n"


def test_without_a_manifest_methods_keep_their_first_appearance(scorers, tmp_path):
    path = write(
        tmp_path / "run" / "results.jsonl",
        [record("sd"), record("floor"), record("sd", id="2")],
    )
    assert main(["eval", "score", str(path)]) == 0
    assert scorers["toy"][0][1] == ["sd", "floor"]


def test_several_runs_are_labelled_by_folder_and_benchmarks_split_under_out(
    scorers, tmp_path, capsys
):
    a = write(
        tmp_path / "a" / "results.jsonl",
        [record("floor"), record("floor", id="2", benchmark="mathvista")],
    )
    b = write(
        tmp_path / "b" / "results.jsonl", [record("asymspec")], methods=["asymspec"]
    )
    out = tmp_path / "rescored"
    assert main(["eval", "score", str(a), str(b), "--out", str(out)]) == 0
    [(toy_records, toy_methods, toy_out, sources)] = scorers["toy"]
    assert (
        [r["method"] for r in toy_records] == ["a/floor", "b/asymspec"] == toy_methods
    )
    assert toy_out == out / "toy" and sources == [a, b]
    [(mv_records, mv_methods, mv_out, _)] = scorers["mathvista"]
    assert mv_methods == ["a/floor"] and mv_out == out / "mathvista"
    assert out.is_dir()
    assert capsys.readouterr().out == "table of toy\ntable of mathvista\n"


def test_runs_in_folders_of_one_name_are_labelled_by_their_whole_folder(tmp_path):
    paths = [
        tmp_path / "x" / "run" / "results.jsonl",
        tmp_path / "y" / "run" / "results.jsonl",
    ]
    assert eval_cli._labels(paths) == [str(p.parent) for p in paths]
    assert eval_cli._labels(
        [tmp_path / "x" / "r.jsonl", tmp_path / "y" / "r.jsonl"]
    ) == ["x", "y"]


@pytest.mark.parametrize(
    "records, words",
    [
        ([], "no result records in {path}"),
        (
            [record("floor", benchmark="nope")],
            "no scorer for benchmark(s) ['nope']; known: ['mathvista', 'toy']",
        ),
        (
            [record("floor", id="7", benchmark="mathvista", answer=3)],
            "{path}: the record of id '7', method 'floor' has answer=3 (int); expected text: fix or remove that line",
        ),
        ([{"id": "1", "method": "floor"}], "{path}"),  # no stats: records.problem
    ],
)
def test_unusable_results_are_one_line_naming_the_file(
    scorers, tmp_path, capsys, records, words
):
    path = write(tmp_path / "run" / "results.jsonl", records)
    assert main(["eval", "score", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asymspec-vl: error: ") and words.format(path=path) in err
    assert err.count("\n") == 1
    assert scorers == {"mathvista": [], "toy": []}


def test_an_unusable_out_folder_is_refused_before_scoring(scorers, tmp_path, capsys):
    path = write(tmp_path / "run" / "results.jsonl", [record("floor")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["eval", "score", str(path), "--out", str(blocker / "out")]) == 2
    assert str(blocker) in capsys.readouterr().err and scorers["toy"] == []


def test_a_broken_manifest_keeps_the_results_order(tmp_path):
    path = write(tmp_path / "run" / "results.jsonl", [])
    (path.parent / "manifest.json").write_text("[1, 2")
    assert eval_cli._run_order(["b", "a"], [path]) == ["b", "a"]
    (path.parent / "manifest.json").write_text('{"methods": "a"}')
    assert eval_cli._run_order(["b", "a"], [path]) == ["b", "a"]
