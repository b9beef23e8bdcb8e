"""`asymspec-vl eval mathvista` end to end on CPU with the tiny models and STAND-IN images (rendered locally):
every artefact, resume after SIGKILL with the same table, settings checks, and `eval score`."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from asymspec_vl.evals.mathvista import release
from asymspec_vl.evals.mathvista.extraction import extract
from asymspec_vl.evals.mathvista.scoring import score

from asymspec_vl.cli import main
from tests.evals.mathvista.test_data import render_standins

pytestmark = pytest.mark.timeout(
    1200
)  # the module's eval runs (its fixtures' subprocesses) take up to 900 s

PIDS = ["2", "3", "5", "6", "8", "9"]  # the first 6 problems of the paper's selection
METHODS = ["floor", "sd", "drafter", "asymspec"]
TIMING = {"tokens/s"}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("standin-mathvista")
    render_standins(root / "images", PIDS)
    return root


def eval_args(tiny_models, images, out, *extra):
    return [
        "eval",
        "mathvista",
        "--limit",
        "6",
        "--images",
        str(images),
        "--out",
        str(out),
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
        "--text-drafter",
        str(tiny_models["text_drafter"]),
        "--device",
        "cpu",
        "--max-new-tokens",
        "4",
        "--no-progress",
        *extra,
    ]


def command(args):
    return [sys.executable, "-m", "asymspec_vl.cli", *args]


ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def records(out):
    return [
        json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def full_run(tiny_models, images, tmp_path_factory):
    """One uninterrupted run of all four methods (the reference for the resume test)."""
    out = tmp_path_factory.mktemp("run") / "full"
    proc = subprocess.run(
        command(eval_args(tiny_models, images, out)),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


@pytest.mark.slow
def test_limit_6_runs_all_four_methods_and_writes_every_artefact(full_run):
    out, stdout = full_run
    recs = records(out)
    assert sorted((r["id"], r["method"]) for r in recs) == sorted(
        (p, m) for p in PIDS for m in METHODS
    )
    for name in (
        "results.jsonl",
        "results.fingerprint.json",
        "table.md",
        "table.csv",
        "table.json",
        "table.png",
        "table_GPS.png",
        "table_VQA.png",
        "table_FQA.png",
        "table_Overall.png",
        "breakdown.json",
        "manifest.json",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    table = json.loads((out / "table.json").read_text())
    assert table["columns"] == [
        "method",
        "GPS",
        "VQA",
        "FQA",
        "Overall",
        "n",
        "errors",
        "tokens/s",
        "acceptance rate",
        "mean accepted length",
    ]
    rows = {r["method"]: r for r in table["rows"]}
    assert list(rows) == ["Floor", "SD", "VL drafter alone", "AsymSpec"]
    assert all(
        r["n"] == 6 and r["errors"] == 0 and r["tokens/s"] > 0 for r in rows.values()
    )
    assert (
        rows["Floor"]["acceptance rate"] is None
        and rows["AsymSpec"]["acceptance rate"] is not None
    )
    assert (
        "| Floor |" in stdout
        and (out / "table.md").read_text().split("\n", 2)[2] in stdout
    )
    for r in recs:
        assert r["benchmark"] == "mathvista" and r["task"] in ("GPS", "VQA", "FQA")
        assert 1 <= r["stats"]["emitted"] <= 4 and r["extractor"] == "rule"
        assert (r["prediction"], r["correct"]) == score(r["extraction"], r)
        assert r["protocol"] == r["scored_by"] == "official"
        assert r["verdicts"]["official"] == {
            k: r[k] for k in ("extraction", "extractor", "prediction", "correct")
        }
        assert r["verdicts"]["official"]["extraction"] == extract(r["response"], r)
        assert r["verdicts"]["release"]["extraction"] == release.extract(
            r["response"], r
        )
        assert (
            r["verdicts"]["release"]["prediction"],
            r["verdicts"]["release"]["correct"],
        ) == release.score(r["verdicts"]["release"]["extraction"], r)
    by_key = {(r["id"], r["method"]): r for r in recs}
    assert all(
        by_key[(p, "sd")]["response"] == by_key[(p, "floor")]["response"] for p in PIDS
    )  # SD == floor
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["models"]["verifier"].endswith("verifier")
        and manifest["config"]["K"] == 4
    )
    assert manifest["config"]["beta"] == 1.0 and manifest["config"]["gamma"] == 0.5
    assert (
        manifest["protocol"]["caption_chars"] == 1600
        and manifest["protocol"]["ocr_chars"] == 800
    )
    assert manifest["protocol"]["name"] == "official"
    assert table["title"] == "MathVista (prompts: official, scoring: official)"
    assert stdout.startswith("# MathVista (prompts: official, scoring: official)")
    assert (
        manifest["data"]["testmini.json"]
        == "69b11b93718d6dceb450d786c2dac3b904e6f8e8aa856aec375d3dea7ba3677f"
    )
    assert manifest["data"]["images"]["source"] == "folder" and manifest["pids"] == PIDS
    assert {"torch", "transformers"} <= set(manifest["versions"]) and len(
        manifest["git"]["commit"]
    ) == 40
    breakdown = json.loads((out / "breakdown.json").read_text())
    assert breakdown["Floor"]["average"]["total"] == 6


def same_table(a: Path, b: Path) -> None:
    ra, rb = (json.loads((x / "table.json").read_text())["rows"] for x in (a, b))
    strip = [
        [{k: v for k, v in row.items() if k not in TIMING} for row in rows]
        for rows in (ra, rb)
    ]
    assert strip[0] == strip[1]


@pytest.mark.slow
def test_sigkill_midway_then_rerun_gives_one_line_each_and_the_same_table(
    full_run, tiny_models, images, tmp_path
):
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        command(eval_args(tiny_models, images, out)),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results = out / "results.jsonl"
    try:
        while not (results.is_file() and results.read_bytes().count(b"\n") >= 3):
            assert proc.poll() is None, "the eval ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert 3 <= results.read_bytes().count(b"\n") < len(PIDS) * len(METHODS)
    again = subprocess.run(
        command(eval_args(tiny_models, images, out)),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr
    keys = [(r["id"], r["method"]) for r in records(out)]
    assert len(keys) == len(set(keys)) == len(PIDS) * len(METHODS)
    same_table(full_run[0], out)
    full = {(r["id"], r["method"]): r["response"] for r in records(full_run[0])}
    assert {(r["id"], r["method"]): r["response"] for r in records(out)} == full


def test_rerun_of_a_finished_run_changes_nothing_and_other_settings_are_refused(
    full_run, tiny_models, images, capsys, monkeypatch
):
    import asymspec_vl.commands

    out = full_run[0]
    before = (out / "results.jsonl").read_bytes()
    with monkeypatch.context() as m:  # everything is done: no model may even be loaded
        m.setattr(
            asymspec_vl.commands,
            "load_from_args",
            lambda args: pytest.fail("models loaded"),
        )
        assert main(eval_args(tiny_models, images, out)) == 0
    assert (out / "results.jsonl").read_bytes() == before
    assert "| AsymSpec |" in capsys.readouterr().out
    assert main(eval_args(tiny_models, images, out, "-K", "2")) == 2
    assert "other settings (differing: config)" in capsys.readouterr().err
    assert (
        main(eval_args(tiny_models, images, out, "--limit", "8")) == 2
    )  # pids 10 and 12 have no image
    err = capsys.readouterr().err
    assert "images are missing for 2 of 8" in err and "--images" in err


def test_eval_score_rescores_and_compares(full_run, tiny_models, tmp_path, capsys):
    out = full_run[0]
    assert (
        main(
            ["eval", "score", str(out / "results.jsonl"), "--out", str(tmp_path / "s")]
        )
        == 0
    )
    printed = capsys.readouterr().out
    rescored = [
        json.loads(x)
        for x in (tmp_path / "s" / "rescored.jsonl").read_text().splitlines()
    ]
    original = records(out)
    assert [(r["id"], r["method"], r["correct"]) for r in rescored] == [
        (r["id"], r["method"], r["correct"]) for r in original
    ]
    same_table(out, tmp_path / "s")
    assert (
        "| VL drafter alone |" in printed
        and (tmp_path / "s" / "table_Overall.png").is_file()
    )
    # a changed saved response is re-extracted and re-scored
    edited = tmp_path / "edited" / "results.jsonl"
    edited.parent.mkdir()
    first = dict(
        original[0],
        response=f"Reasoning...\nThe final answer is {original[0]['answer']}.",
    )
    edited.write_text("\n".join(json.dumps(r) for r in [first, *original[1:]]) + "\n")
    assert main(["eval", "score", str(edited), "--out", str(tmp_path / "e")]) == 0
    capsys.readouterr()
    row0 = json.loads((tmp_path / "e" / "rescored.jsonl").read_text().splitlines()[0])
    assert row0["correct"] is True and row0["prediction"] == original[0]["answer"]
    # two runs side by side: rows labelled by folder
    assert (
        main(
            [
                "eval",
                "score",
                str(out / "results.jsonl"),
                str(edited),
                "--extract",
                "keep",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "| full/floor |" in table and "| edited/asymspec |" in table


def test_eval_score_with_llm_extraction_plumbing(
    full_run, tiny_models, tmp_path, capsys
):
    few = tmp_path / "few" / "results.jsonl"
    few.parent.mkdir()
    few.write_text(
        "".join(
            line + "\n"
            for line in (full_run[0] / "results.jsonl").read_text().splitlines()[:2]
        )
    )
    assert main(["eval", "score", str(few), "--extract", "llm"]) == 2
    assert "needs --verifier" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "score",
                str(few),
                "--extract",
                "llm",
                "--verifier",
                str(tiny_models["verifier"]),
                "--device",
                "cpu",
                "--out",
                str(tmp_path / "llm"),
            ]
        )
        == 0
    )
    rows = [
        json.loads(x)
        for x in (tmp_path / "llm" / "rescored.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 2 and all(r["extractor"].startswith("llm:") for r in rows)
    assert all(
        (r["prediction"], r["correct"]) == score(r["extraction"], r) for r in rows
    )


@pytest.mark.parametrize("batch", ["1", "2"])
def test_a_broken_image_fails_only_the_methods_that_read_it(
    full_run, tiny_models, tmp_path, capsys, batch
):
    """pid 3's image is broken: the drafter's job is a typed error record (batched too: the group is decoded
    again job by job, so the error lands on pid 3); the Floor never reads the image and answers as with a
    good one."""
    render_standins(tmp_path / "mv" / "images", ["2", "3"])
    (tmp_path / "mv" / "images" / "3.png").write_bytes(b"not an image")
    assert (
        main(
            eval_args(
                tiny_models,
                tmp_path / "mv",
                tmp_path / "out",
                "--limit",
                "2",
                "--methods",
                "floor,drafter",
                "--batch",
                batch,
            )
        )
        == 0
    )
    capsys.readouterr()
    got = {(r["id"], r["method"]): r for r in records(tmp_path / "out")}
    bad = got[("3", "drafter")]
    assert bad["error"]["type"] == "InvalidImageError" and bad["correct"] is False
    assert (
        bad["task"] == "GPS" and bad["answer"] and bad["benchmark"] == "mathvista"
    )  # still scorable
    assert all(
        "error" not in got[k]
        for k in [("2", "floor"), ("3", "floor"), ("2", "drafter")]
    )
    reference = {(r["id"], r["method"]): r["response"] for r in records(full_run[0])}
    assert got[("3", "floor")]["response"] == reference[("3", "floor")]
    rows = {
        r["method"]: r
        for r in json.loads((tmp_path / "out" / "table.json").read_text())["rows"]
    }
    assert (
        rows["VL drafter alone"]["errors"],
        rows["VL drafter alone"]["n"],
        rows["Floor"]["errors"],
    ) == (1, 2, 0)
    assert main(["eval", "score", str(tmp_path / "out" / "results.jsonl")]) == 0


def test_batched_run_gives_the_same_answers(
    full_run, tiny_models, images, tmp_path, capsys
):
    """--batch 4: each method's problems decoded 4 then 2 at a time; the same responses, extractions and
    scores as one at a time, each line marked with its batch size; --batch 0 is refused."""
    out = tmp_path / "batched"
    assert main(eval_args(tiny_models, images, out, "--batch", "4")) == 0
    capsys.readouterr()
    key = ("response", "extraction", "prediction", "correct", "finish_reason")
    one = {(r["id"], r["method"]): [r[k] for k in key] for r in records(full_run[0])}
    four = {(r["id"], r["method"]): [r[k] for k in key] for r in records(out)}
    assert four == one
    assert sorted(r["batch"] for r in records(out) if r["method"] == "asymspec") == [
        2,
        2,
        4,
        4,
        4,
        4,
    ]
    assert json.loads((out / "manifest.json").read_text())["batch"] == 4
    with pytest.raises(SystemExit):
        main(eval_args(tiny_models, images, tmp_path / "zero", "--batch", "0"))


@pytest.fixture(scope="module")
def release_run(tiny_models, images, tmp_path_factory):
    """The same run under --protocol release (the authors' prompts and scoring)."""
    out = tmp_path_factory.mktemp("run") / "release"
    assert main(eval_args(tiny_models, images, out, "--protocol", "release")) == 0
    return out


def test_release_protocol_run_writes_the_same_artefacts(
    full_run, release_run, tiny_models, images, capsys
):
    official, out = full_run[0], release_run
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in official.iterdir()
    )
    tables = [json.loads((x / "table.json").read_text()) for x in (official, out)]
    assert tables[1]["columns"] == tables[0]["columns"]
    assert [r["method"] for r in tables[1]["rows"]] == [
        r["method"] for r in tables[0]["rows"]
    ]
    assert tables[1]["title"] == "MathVista (prompts: release, scoring: release)"
    assert (
        (out / "table.md")
        .read_text()
        .startswith("# MathVista (prompts: release, scoring: release)")
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["protocol"]["name"] == "release" and manifest["pids"] == PIDS
    recs = records(out)
    assert sorted((r["id"], r["method"]) for r in recs) == sorted(
        (p, m) for p in PIDS for m in METHODS
    )
    for r in (
        recs
    ):  # the headline is the release's verdict; the official one is stored beside it
        assert (
            r["protocol"] == r["scored_by"] == "release"
            and r["extractor"] == "release-rules"
        )
        assert r["verdicts"]["release"] == {
            k: r[k] for k in ("extraction", "extractor", "prediction", "correct")
        }
        assert (r["prediction"], r["correct"]) == release.score(
            release.extract(r["response"], r), r
        )
        assert (
            r["verdicts"]["official"]["prediction"]
            == score(extract(r["response"], r), r)[0]
        )
    ours = {(r["id"], r["method"]): r["response"] for r in records(official)}
    theirs = {(r["id"], r["method"]): r["response"] for r in recs}
    assert all(
        theirs[(p, "drafter")] == ours[(p, "drafter")] for p in PIDS
    )  # image + query in both
    assert any(
        theirs[(p, "floor")] != ours[(p, "floor")] for p in PIDS
    )  # the verifier's text differs
    assert (
        main(eval_args(tiny_models, images, official, "--protocol", "release")) == 2
    )  # no resume across
    assert "other settings (differing: protocol)" in capsys.readouterr().err


def test_eval_score_under_either_protocol(full_run, release_run, tmp_path, capsys):
    official = records(full_run[0])
    assert (
        main(
            [
                "eval",
                "score",
                str(full_run[0] / "results.jsonl"),
                "--protocol",
                "release",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(
        "# MathVista, re-scored (prompts: official, scoring: release)"
    )
    rescored = [
        json.loads(x)
        for x in (tmp_path / "r" / "rescored.jsonl").read_text().splitlines()
    ]
    assert [(r["scored_by"], r["correct"]) for r in rescored] == [
        ("release", r["verdicts"]["release"]["correct"]) for r in official
    ]
    assert [r["verdicts"] for r in rescored] == [r["verdicts"] for r in official]
    assert (
        main(["eval", "score", str(release_run / "results.jsonl"), "--extract", "keep"])
        == 0
    )  # own protocol
    printed = capsys.readouterr().out
    assert printed.startswith(
        "MathVista, re-scored (prompts: release, scoring: release)"
    )
    assert (
        printed.split("\n", 2)[2].strip()
        == (release_run / "table.md").read_text().split("\n", 2)[2].strip()
    )


def run_with_read_only(folder: Path, args):
    """Run the CLI with `folder` read-only: as root (whom permissions do not stop) under a read-only bind mount
    in a user namespace, otherwise with the folder's write permissions removed."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        cmd = ["unshare", "-rm", "sh", "-c", script, str(folder), *command(args)]
    else:
        folder.chmod(0o555)
        cmd = command(args)
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)


def test_an_unusable_output_folder_is_one_line_naming_it(
    full_run, tiny_models, images, tmp_path, capsys
):
    (tmp_path / "taken").write_text("a file")
    results = str(full_run[0] / "results.jsonl")
    for args in (
        eval_args(tiny_models, images, tmp_path / "taken"),
        eval_args(tiny_models, images, tmp_path / "taken" / "run"),
        ["eval", "score", results, "--out", str(tmp_path / "taken")],
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err == (
            f"asymspec-vl: error: the output folder {args[args.index('--out') + 1]} cannot be made: "
            f"{tmp_path / 'taken'} is a file, not a folder; choose another output folder\n"
        )
    locked = tmp_path / "locked"
    for args in (
        eval_args(tiny_models, images, locked / "run"),
        ["eval", "score", results, "--out", str(locked)],
    ):
        proc = run_with_read_only(locked, args)
        target = args[args.index("--out") + 1]
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(
            f"asymspec-vl: error: cannot write in the output folder {target}: "
        )
        assert (
            "read-only" if os.geteuid() == 0 else "permission denied"
        ) in proc.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "[1, 2, 3]",
            "a testmini record must be a JSON object of a problem's fields, not int 1",
        ),
        ('{"2": 5}', "pid '2' maps to int 5; expected a pid -> problem object"),
        (
            '"testmini"',
            "must hold a pid -> problem object or a list of problems, not str",
        ),
        (
            '{"2": {"question": "How many?"}}',
            "testmini record '2' lacks or mangles field 'answer'",
        ),
    ],
)
def test_annotations_of_the_wrong_shape_are_one_line_naming_the_file(
    tiny_models, tmp_path, capsys, content, message
):
    render_standins(tmp_path / "mv" / "images", ["2"])
    (tmp_path / "mv" / "testmini.json").write_text(content)
    assert main(eval_args(tiny_models, tmp_path / "mv", tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"asymspec-vl: error: {tmp_path / 'mv' / 'testmini.json'}")
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("response", 123, "has response=123 (int); expected text"),
        ("choices", "A,B", "has choices=A,B; expected a list of texts or null"),
        ("verdicts", {"release": 5}, "has verdicts={'release': 5}"),
    ],
)
def test_a_results_record_of_the_wrong_shape_is_one_line_naming_the_file(
    full_run, tmp_path, capsys, field, value, message
):
    recs = records(full_run[0])
    recs[1] = dict(recs[1], **{field: value})
    path = tmp_path / "edited" / "results.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["eval", "score", str(path)]) == 2
    err = capsys.readouterr().err
    method = recs[1]["method"] if field != "method" else None
    assert err.startswith(
        f"asymspec-vl: error: {path}: the record of id {recs[1]['id']!r}, method {method!r} "
        f"{message}"
    )
    assert err.endswith(": fix or remove that line\n") and err.count("\n") == 1


def test_a_results_record_without_its_method_is_one_line_naming_the_file_and_line(
    full_run, tmp_path, capsys
):
    recs = records(full_run[0])
    recs[1] = dict(recs[1], method=None)
    path = tmp_path / "edited" / "results.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["eval", "score", str(path)]) == 2
    assert capsys.readouterr().err == (
        f'asymspec-vl: error: {path}: line 2 is no results record: its "method" is '
        "null, expected text; fix or remove that line\n"
    )


@pytest.mark.parametrize(
    "argv", [["eval", "mathvista", "--help"], ["eval", "score", "--help"]]
)
def test_help_states_each_default_once_as_typed(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: nothing wrapped
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if "(default" in line]
    assert lines and all(
        line.count("(default") == 1 for line in lines
    )  # never "(...) (default: None)"
    assert (
        "(default: None)" not in text
        and "(default: False)" not in text
        and "['" not in text
    )
    if argv[1] == "mathvista":
        assert (
            "(default: floor,sd,drafter,asymspec)" in text
            and "(default: cuda if available, else cpu)" in text
        )
        assert (
            "(default: Qwen/Qwen3-VL-2B-Instruct; embedded when --verifier is embedded or"
            in text
        )
        assert "(default: official)" in text
        assert (
            "default: ~/.cache/asymspec-vl/mathvista if it exists, else the hub\n"
            in text
        )
    else:
        assert (
            "(default: rule)" in text
            and "(default: of the protocol each run used)" in text
        )
