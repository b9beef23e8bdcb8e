"""Results files that would move a table or lose work (evals/records.py, evals/jobs.py): a line without "correct"
and a second line of one (id, method) are refused naming their lines, on every read and by `eval score`; a file
that cannot be appended to is refused before the first job runs; a line the disk cannot take (full) stops the run
with a typed error, the record on stderr and the file as it was, so a rerun resumes."""

import errno
import json
import os

import pytest
from asymspec_vl.evals import jobs as jobs_module
from asymspec_vl.evals.jobs import (
    Job,
    ResultsFileError,
    ResultsLog,
    ResultsNotKeptError,
    read_records,
    run_jobs,
)

from asymspec_vl.cli import main

STATS = {"emitted": 3, "elapsed_s": 1.0, "steps": 2, "drafted": 2, "accepted": 1}


def record(id="1", method="a", **extra):
    return {
        "id": id,
        "method": method,
        "benchmark": "toy",
        "correct": True,
        "stats": STATS,
        **extra,
    }


def write(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _work(job):
    return {"correct": None, "stats": STATS}


def reads(path):
    """Every way a results file is read: a resume (load, done_keys), a re-score, a run over it."""
    return (
        lambda: ResultsLog(path).load(),
        lambda: ResultsLog(path).done_keys(),
        lambda: read_records(path),
        lambda: run_jobs(
            [Job("9", "a")],
            lambda j: {"correct": None, "stats": STATS},
            ResultsLog(path),
            progress=False,
        ),
    )


def test_an_outcome_without_correct_is_refused_naming_its_line(tmp_path):
    unscored = {k: v for k, v in record(id="2").items() if k != "correct"}
    path = write(tmp_path / "r.jsonl", record(), unscored)
    for read in reads(path):
        with pytest.raises(
            ResultsFileError,
            match=r'line 2 is no results record: its "correct" is missing',
        ):
            read()


def test_a_repeated_id_and_method_is_refused_naming_both_lines(tmp_path, capsys):
    path = write(tmp_path / "r.jsonl", record(), record(id="2"), record())
    for read in reads(path):
        with pytest.raises(
            ResultsFileError,
            match=r"line 3 repeats the record of id '1', method 'a' \(line 1\)",
        ):
            read()
    # `eval score` counted it twice; now one error line, rc 2
    assert main(["eval", "score", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 3 repeats the record" in err and err.count("\n") == 1


def test_the_same_id_under_two_methods_is_two_records(tmp_path):
    path = write(tmp_path / "r.jsonl", record(), record(method="b"))
    assert len(read_records(path)) == 2


def _refuse_append(monkeypatch, path):
    """The results file reads but cannot be appended to (as a read-only file is for a non-root user)."""
    real_open = type(path).open

    def open_(self, mode="r", *a, **k):
        if self == path and "a" in mode:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(type(path), "open", open_)


def test_a_file_that_cannot_be_appended_to_is_refused_before_any_work(
    tmp_path, monkeypatch
):
    path = write(tmp_path / "r.jsonl", record())
    _refuse_append(monkeypatch, path)
    ran = []
    with pytest.raises(
        ResultsFileError, match=r"cannot append to .*r\.jsonl \(permission denied\)"
    ):
        run_jobs(
            [Job("2", "a")],
            lambda j: ran.append(j) or {"correct": True, "stats": STATS},
            ResultsLog(path),
            progress=False,
        )
    assert ran == []  # nothing computed that could not be kept
    with pytest.raises(ResultsFileError, match="no result could be kept"):
        ResultsLog(path).check_writable()


def test_a_full_disk_stops_the_run_with_the_record_on_stderr_and_the_file_as_it_was(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "r.jsonl"
    work = lambda j: {"correct": j.id == "1", "stats": STATS}  # noqa: E731
    todo = [Job(str(i), "a") for i in range(3)]
    run_jobs(todo[:1], work, ResultsLog(path), progress=False)
    kept = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    real_fsync = os.fsync
    monkeypatch.setattr(jobs_module.os, "fsync", full)
    with pytest.raises(
        ResultsNotKeptError, match=r"cannot append to .* \(no space left on device\)"
    ) as e:
        run_jobs(todo, work, ResultsLog(path), progress=False)
    assert e.value.record["id"] == "1" and e.value.record["correct"] is True
    assert (
        json.loads(capsys.readouterr().err.strip().splitlines()[-1]) == e.value.record
    )
    assert path.read_bytes() == kept  # no torn line
    monkeypatch.setattr(jobs_module.os, "fsync", real_fsync)
    done = run_jobs(todo, work, ResultsLog(path), progress=False)  # the rerun resumes
    assert [r["id"] for r in done] == ["0", "1", "2"] and len(read_records(path)) == 3
