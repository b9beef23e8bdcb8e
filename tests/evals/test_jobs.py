"""The generic resumable eval runner: one fsynced JSON line per job, resume without recomputing or duplicating
(also after a SIGKILL and a torn last line), typed errors recorded, settings checked; and the summary step."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from asymspec_vl.evals.jobs import (
    BatchedWork,
    Job,
    OutputFolderError,
    ResultsFileError,
    ResultsLog,
    ResumeMismatchError,
    read_records,
    run_jobs,
    writable_folder,
)
from asymspec_vl.evals.summary import accuracy, speed, summarize, write_summary

from asymspec_vl.core.errors import InputError


def jobs(n=3, methods=("a", "b")):
    return [Job(str(i), m, i) for i in range(n) for m in methods]


def work(job):
    return {
        "correct": job.payload % 2 == 0,
        "stats": {
            "emitted": 10,
            "elapsed_s": 2.0,
            "steps": 5,
            "drafted": 8 if job.method == "b" else 0,
            "accepted": 4,
        },
    }


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_runs_every_job_once_and_writes_a_line_each(tmp_path):
    log = ResultsLog(tmp_path / "r.jsonl")
    recs = run_jobs(jobs(), work, log, progress=False)
    assert [(r["id"], r["method"]) for r in recs] == [j.key for j in jobs()]
    on_disk = lines(tmp_path / "r.jsonl")
    assert [(r["id"], r["method"]) for r in on_disk] == [j.key for j in jobs()]
    assert all(
        r["correct"] == (int(r["id"]) % 2 == 0) and "wall_s" in r for r in on_disk
    )


def test_ctrl_c_says_how_many_results_are_kept_and_that_a_rerun_resumes(
    tmp_path, capsys
):
    log = ResultsLog(tmp_path / "r.jsonl")

    def interrupted_at_the_third(job):
        if job.key == ("1", "a"):
            raise KeyboardInterrupt
        return work(job)

    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs(), interrupted_at_the_third, log, progress=False)
    err = capsys.readouterr().err
    assert (
        f"interrupted: 2 of 6 results are kept in {tmp_path / 'r.jsonl'}" in err
        and "rerun" in err
    )
    assert len(lines(tmp_path / "r.jsonl")) == 2


def test_rerun_resumes_without_recomputing_or_duplicating(tmp_path):
    log = ResultsLog(tmp_path / "r.jsonl")
    run_jobs(jobs(2), work, log, progress=False)
    calls = []

    def counting(job):
        calls.append(job.key)
        return work(job)

    recs = run_jobs(
        jobs(3), counting, log, progress=False
    )  # the run grows by one problem
    assert calls == [("2", "a"), ("2", "b")]
    assert len(recs) == 6 and len(lines(tmp_path / "r.jsonl")) == 6
    assert (
        run_jobs(jobs(3), lambda j: pytest.fail("recomputed"), log, progress=False)
        == recs
    )


def test_torn_last_line_is_cut_and_the_job_redone(tmp_path):
    path = tmp_path / "r.jsonl"
    run_jobs(jobs(1), work, ResultsLog(path), progress=False)
    with path.open("ab") as f:
        f.write(b'{"id": "1", "method": "a", "corr')  # a crash mid-write
    assert (
        len(read_records(path)) == 2
    )  # reading ignores the torn tail and leaves the file alone
    assert path.read_bytes().endswith(b'"corr')
    recs = run_jobs(jobs(2), work, ResultsLog(path), progress=False)
    assert [(r["id"], r["method"]) for r in lines(path)] == [j.key for j in jobs(2)]
    assert len(recs) == 4


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps({"id": "0", "method": "a", "correct": True, "stats": {}})
    )
    calls = []
    run_jobs(
        jobs(1),
        lambda j: calls.append(j.key) or work(j),
        ResultsLog(path),
        progress=False,
    )
    assert calls == [("0", "b")]
    assert [(r["id"], r["method"]) for r in lines(path)] == [("0", "a"), ("0", "b")]


def test_corrupt_line_before_the_end_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"id": "0", "method": "a", "correct": true, "stats": {}}\nnot json\n'
        '{"id": "1", "method": "a", "correct": true, "stats": {}}\n'
    )
    with pytest.raises(ResultsFileError, match="line 2"):
        ResultsLog(path).load()
    with pytest.raises(ResultsFileError, match="not found"):
        read_records(tmp_path / "missing.jsonl")


def test_typed_errors_are_recorded_and_other_errors_stop_the_run(tmp_path):
    def failing(job):
        if job.key == ("1", "a"):
            raise InputError("the image is broken")
        if job.key == ("2", "a"):
            raise RuntimeError("a bug")
        return work(job)

    path = tmp_path / "r.jsonl"
    with pytest.raises(RuntimeError, match="a bug"):
        run_jobs(
            jobs(3),
            failing,
            ResultsLog(path),
            progress=False,
            base=lambda j: {"group": j.payload % 2},
        )
    done = lines(path)
    assert [(r["id"], r["method"]) for r in done] == [
        ("0", "a"),
        ("0", "b"),
        ("1", "a"),
        ("1", "b"),
    ]
    assert done[2]["error"] == {"type": "InputError", "message": "the image is broken"}
    assert (
        done[2]["correct"] is False and done[2]["group"] == 1
    )  # base fields reach error records too
    assert done[0]["group"] == 0 and done[0]["stats"]["emitted"] == 10


def test_resume_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    run_jobs(jobs(1), work, ResultsLog(path, {"K": 4}), progress=False)
    assert json.loads((tmp_path / "r.fingerprint.json").read_text()) == {"K": 4}
    run_jobs(jobs(1), work, ResultsLog(path, {"K": 4}), progress=False)
    with pytest.raises(ResumeMismatchError, match="differing: K"):
        ResultsLog(path, {"K": 2}).load()
    other = tmp_path / "o.jsonl"
    run_jobs(
        jobs(1), work, ResultsLog(other), progress=False
    )  # results made without a fingerprint
    with pytest.raises(ResumeMismatchError, match="no o.fingerprint.json"):
        ResultsLog(other, {"K": 4}).load()


def test_duplicate_jobs_and_concurrent_writers_are_refused(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        run_jobs(
            [Job("1", "a"), Job("1", "a")],
            work,
            ResultsLog(tmp_path / "r.jsonl"),
            progress=False,
        )
    log = ResultsLog(tmp_path / "r.jsonl")
    with log.locked():
        with pytest.raises(ResultsFileError, match="another run"):
            run_jobs(jobs(1), work, ResultsLog(tmp_path / "r.jsonl"), progress=False)


SCRIPT = textwrap.dedent("""
    import pathlib, sys, time
    from asymspec_vl.evals.jobs import Job, ResultsLog, run_jobs
    out = pathlib.Path(sys.argv[1])
    def work(job):
        if job.key == ("3", "b") and not (out / "resumed").exists():
            (out / "ready").write_text("x")   # the parent SIGKILLs us while we wait here
            while True:
                time.sleep(1)
        return {"correct": int(job.id) % 3 == 0, "stats": {"emitted": 1, "elapsed_s": 1.0}}
    jobs = [Job(str(i), m) for i in range(6) for m in ("a", "b")]
    run_jobs(jobs, work, ResultsLog(out / "r.jsonl", {"run": 1}), progress=False)
""")


def test_sigkill_midway_then_rerun_gives_one_record_per_job(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env)
    try:
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(lines(tmp_path / "r.jsonl")) == 7  # jobs 0a .. 3a
    (tmp_path / "resumed").write_text("x")
    subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, check=True)
    keys = [(r["id"], r["method"]) for r in lines(tmp_path / "r.jsonl")]
    assert (
        sorted(keys) == sorted((str(i), m) for i in range(6) for m in ("a", "b"))
        and len(set(keys)) == 12
    )


def test_summary_rows_and_outputs(tmp_path):
    recs = run_jobs(jobs(4), work, ResultsLog(tmp_path / "r.jsonl"), progress=False)
    recs.append(
        {
            "id": "9",
            "method": "b",
            "correct": False,
            "error": {"type": "InputError", "message": "x"},
        }
    )
    groups = {
        "even": lambda r: int(r["id"]) % 2 == 0,
        "low": lambda r: int(r["id"]) < 2,
    }
    rows = summarize(recs, groups, ["b", "a"], names={"a": "Method A"})
    assert [r["method"] for r in rows] == ["b", "Method A"]
    a = rows[1]
    assert (a["even"], a["low"], a["Overall"], a["n"], a["errors"]) == (
        100.0,
        50.0,
        50.0,
        4,
        0,
    )
    assert (
        a["tokens/s"] == 5.0
        and a["acceptance rate"] is None
        and a["mean accepted length"] == 2.0
    )
    b = rows[0]
    assert b["Overall"] == 40.0 and b["errors"] == 1 and b["acceptance rate"] == 0.5
    assert accuracy([{"correct": None}]) is None
    assert speed([])["tokens/s"] is None
    columns = ["method", "even", "low", "Overall", "tokens/s"]
    paths = write_summary(rows, columns, tmp_path, "t", "T", ["even", "Overall"])
    assert (
        paths["md"]
        .read_text()
        .startswith("# T\n\n| method | even | low | Overall | tokens/s |")
    )
    for key in ("csv", "json", "png", "png:even", "png:Overall"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0
    assert paths["png:Overall"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batched_work_groups_by_method_and_pins_errors_on_their_job(tmp_path):
    """Batches of up to 3 pending jobs of one method, in job order (done jobs skipped); a typed error in a
    batch sends its jobs one by one, so only the bad job's line has the error."""
    calls = []

    def decode(group):
        calls.append([j.key for j in group])
        if any(j.payload == 4 and j.method == "b" for j in group):
            raise InputError("item 4 is broken")
        return [work(j) for j in group]

    log = ResultsLog(tmp_path / "r.jsonl")
    all_jobs = jobs(n=6)
    run_jobs(
        all_jobs[:2], work, log, progress=False
    )  # ("0", "a"), ("0", "b") already done
    recs = run_jobs(
        all_jobs, BatchedWork(all_jobs, log.done_keys(), 3, decode), log, progress=False
    )
    assert calls[:3] == [
        [("1", "a"), ("2", "a"), ("3", "a")],
        [("1", "b"), ("2", "b"), ("3", "b")],
        [("4", "a"), ("5", "a")],
    ]
    assert calls[3:] == [[("4", "b"), ("5", "b")], [("4", "b")], [("5", "b")]]
    assert [r["id"] for r in recs if "error" in r] == ["4"] and recs[9]["error"][
        "type"
    ] == "InputError"
    assert len(lines(tmp_path / "r.jsonl")) == 12
    with pytest.raises(ValueError, match="batch"):
        BatchedWork(all_jobs, set(), 0, decode)


def test_an_output_folder_in_place_of_a_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "taken").write_text("a file")
    for where in (tmp_path / "taken", tmp_path / "taken" / "deeper"):
        with pytest.raises(OutputFolderError) as err:
            writable_folder(where)
        assert str(err.value) == (
            f"the output folder {where} cannot be made: {tmp_path / 'taken'} is a file, "
            "not a folder; choose another output folder"
        )
        with pytest.raises(OutputFolderError):
            run_jobs(
                jobs(1), work, ResultsLog(where / "r.jsonl", {"k": 1}), progress=False
            )
    assert writable_folder(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert list((tmp_path / "new" / "run").iterdir()) == []  # the probe file is gone


def test_a_request_the_model_run_failed_is_an_error_record_not_a_scored_answer(
    tmp_path,
):
    """generate_batch marks a request the engine failed (finish_reason "error") beside the finished ones; the
    eval records that job as an error (counted in the table's errors column), the others as answers."""
    from asymspec_vl.evals.toy import eval as toy_eval

    from asymspec_vl.api import GenerationResult
    from asymspec_vl.core.trace import Stats
    from asymspec_vl.toy import world

    examples = world.heldout(3)

    class EngineFailsTheSecond:
        def generate_batch(self, requests, method, cfg):
            return [
                GenerationResult(
                    f"The answer is {ex.target}.",
                    [1, 2, 3],
                    [],
                    Stats(emitted=3, elapsed_s=1.0),
                    None,
                    method,
                    cfg,
                    "error" if i == 1 else "stop",
                    error="InvalidImageError: pixel_values hold NaN" if i == 1 else "",
                )
                for i, ex in enumerate(examples[: len(requests)])
            ]

    records = toy_eval.evaluate(
        EngineFailsTheSecond(),
        examples,
        ["floor"],
        ResultsLog(tmp_path / "r.jsonl"),
        batch=3,
        progress=False,
    )
    assert [r.get("error", {}).get("type") for r in records] == [
        None,
        "RequestFailedError",
        None,
    ]
    assert (
        "pixel_values hold NaN" in records[1]["error"]["message"]
        and records[1]["correct"] is False
    )
    assert records[0]["correct"] is True and records[2]["correct"] is True


GOOD = {
    "id": "1",
    "method": "a",
    "correct": True,
    "stats": {"emitted": 3, "elapsed_s": 1.0},
}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"id": None}, '"id" is null, expected text'),
        ({"method": 7}, '"method" is 7, expected text'),
        ({"stats": None}, '"stats" is null, expected an object of counters'),
        ({"correct": "yes"}, '"correct" is "yes", expected true, false or null'),
        ({"correct": 1}, '"correct" is 1, expected true, false or null'),
        ({"stats": {"emitted": "3"}}, "stats emitted are not numbers"),
        ({"error": "boom"}, '"error" is "boom", expected {"type", "message"}'),
    ],
)
def test_a_record_missing_its_fields_is_a_one_line_error_naming_the_file(
    tmp_path, change, words
):
    path = tmp_path / "r.jsonl"
    bad = {k: v for k, v in {**GOOD, **change}.items()}
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    for read in (
        lambda: ResultsLog(path).load(),
        lambda: ResultsLog(path).done_keys(),
        lambda: read_records(path),
        lambda: run_jobs(jobs(1), work, ResultsLog(path), progress=False),
    ):
        with pytest.raises(ResultsFileError) as e:
            read()
        assert str(e.value).startswith(
            f"{path}: line 2 is no results record: its "
        ) and words in str(e.value)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("missing", ["id", "method"])
def test_a_record_without_its_key_is_refused(tmp_path, missing):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != missing}) + "\n")
    with pytest.raises(
        ResultsFileError,
        match=f'line 1 is no results record: its "{missing}" is missing',
    ):
        read_records(path)


def test_error_records_and_unscored_records_are_good(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [
        {
            "id": "1",
            "method": "a",
            "error": {"type": "InputError", "message": "bad"},
            "correct": False,
        },
        {**GOOD, "id": "2", "correct": None},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_records(path) == rows


def test_a_torn_fingerprint_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "r.jsonl"
    run_jobs(jobs(1), work, ResultsLog(path, {"model": "m"}), progress=False)
    fingerprint = tmp_path / "r.fingerprint.json"
    fingerprint.write_text(fingerprint.read_text()[:7])  # cut short
    with pytest.raises(
        ResultsFileError, match=f"^{fingerprint} cannot be read .*cut short or edited"
    ):
        run_jobs(jobs(1), work, ResultsLog(path, {"model": "m"}), progress=False)
    fingerprint.write_text("[1, 2]")
    with pytest.raises(
        ResultsFileError, match=f"^{fingerprint} holds list, not the settings of a run"
    ):
        ResultsLog(path, {"model": "m"}).load()


def test_the_fingerprint_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A crash while writing it (here: the disk fills mid-write) leaves no fingerprint file, not half of one."""
    path = tmp_path / "r.jsonl"

    class Full(OSError):
        pass

    def failing_fsync(fd):
        raise Full(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(Full):
        ResultsLog(path, {"model": "m"}).load()
    monkeypatch.undo()
    assert [
        p.name for p in tmp_path.iterdir()
    ] == []  # neither a torn file nor a temporary one
    ResultsLog(path, {"model": "m"}).load()
    assert json.loads((tmp_path / "r.fingerprint.json").read_text()) == {"model": "m"}


@pytest.mark.parametrize("which", ["r.jsonl", "r.fingerprint.json"])
def test_a_folder_where_a_results_file_belongs_is_a_one_line_error(tmp_path, which):
    (tmp_path / which).mkdir()
    path = tmp_path / "r.jsonl"
    with pytest.raises(
        ResultsFileError, match=f"^{tmp_path / which} is a folder, not a results file"
    ):
        run_jobs(jobs(1), work, ResultsLog(path, {"model": "m"}), progress=False)
    if which == "r.jsonl":
        with pytest.raises(ResultsFileError, match="is a folder"):
            read_records(path)


def test_records_carry_their_settings_and_a_copied_in_file_is_refused(tmp_path):
    mine, other = tmp_path / "mine" / "r.jsonl", tmp_path / "other" / "r.jsonl"
    for p in (mine, other):
        p.parent.mkdir()
    recs = run_jobs(
        jobs(1), work, ResultsLog(other, {"model": "other"}), progress=False
    )
    assert len({r["fingerprint"] for r in lines(other)}) == 1 and lines(other) == recs
    run_jobs(jobs(1), work, ResultsLog(mine, {"model": "mine"}), progress=False)
    mine.write_bytes(
        other.read_bytes()
    )  # the other run's results copied over mine (my fingerprint file stays)
    with pytest.raises(
        ResumeMismatchError, match=f"^{mine}: line 1 was made with other settings"
    ):
        run_jobs(jobs(1), work, ResultsLog(mine, {"model": "mine"}), progress=False)
    legacy = [{k: v for k, v in r.items() if k != "fingerprint"} for r in lines(other)]
    mine.write_text(
        "".join(json.dumps(r) + "\n" for r in legacy)
    )  # lines from before records carried one
    assert len(ResultsLog(mine, {"model": "mine"}).load()) == 2


def test_the_live_accuracy_is_one_methods_never_pooled(tmp_path, capsys):
    """The bar shows the figures of the method whose job just finished, over that method's jobs alone."""

    def scored(job):
        fast = job.method == "asymspec"
        return {
            "correct": fast,
            "stats": {"emitted": 10, "elapsed_s": 0.5 if fast else 2.0},
        }

    order = [Job(str(i), m, i) for m in ("floor", "asymspec") for i in range(2)]
    run_jobs(
        order, scored, ResultsLog(tmp_path / "r.jsonl"), desc="eval", progress=True
    )
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "asymspec: acc 100.0% of 2, 20.0 tok/s" in last, (
        last
    )  # not 50 % and 8 tok/s pooled with the Floor's
