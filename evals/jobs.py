"""A resumable eval runner: (item id, method) jobs, one JSON line per finished job, rerun = resume.

API (shared by every eval: MathVista, the toy world, ...)
    Job(id, method, payload=None)
        one unit of work; its key (id, method) is unique within a run.
    ResultsLog(path, fingerprint=None)
        the JSONL file of finished jobs. fingerprint: a JSON-able dict of the settings that make results
        comparable (models, decoding config, protocol); it is stored beside the log as
        <stem>.fingerprint.json (written whole, atomically), and reopening the log with a different one raises
        ResumeMismatchError; every line it writes carries that fingerprint's digest, and a line with another
        digest raises ResumeMismatchError too (a results file copied in from another run). What a line must
        hold: records.py.
        .load() -> {(id, method): record}: every complete line; a torn last line (a crash mid-write) is cut
        off the file; a broken line anywhere else, or one missing its fields, raises ResultsFileError naming
        the file and the line, as do a torn fingerprint file and a folder where the file belongs.
        .done_keys() -> {(id, method)}: the same, read only (nothing is repaired).
        .append(record): one line, then flush + fsync, so a finished job survives a SIGKILL; a line that cannot
        be written (a full disk) is cut back off and raises ResultsNotKeptError carrying the record.
        .check_writable(): ResultsFileError unless the file can be appended to (a read-only file, a folder
        without write permission); run_jobs calls it before the first job, and a CLI before it loads models.
    run_jobs(jobs, work, log, desc="eval", progress=True, base=None) -> [record, ...] in job order
        runs work(job) -> dict for every job whose key is not in the log yet, appending each record as
        soon as it is done; jobs already in the log are not recomputed. A record is "id", "method", then
        base(job) (fields known before the work runs, kept in error records too), then work's fields.
        Record fields it reads: "correct" (bool, or None when not scored) for the running accuracy and
        "stats" {"emitted", "elapsed_s", ...} for tokens/s, both shown per method on a tqdm bar.
        A record the log cannot take (ResultsNotKeptError: a full disk) stops the run with that error, the
        record written to stderr as its JSON line, so nothing computed is lost.
        A typed error (asymspec_vl.core.errors.AsymSpecError) raised by work() is recorded as
        {"error": {"type", "message"}, "correct": False} and the run goes on; any other exception stops
        the run (a bug) with every finished job already on disk. One process writes a log at a time
        (an flock on .<stem>.lock).
    BatchedWork(jobs, done, batch, decode)
        a work(job) that decodes `batch` jobs of one method at a time: decode(group) -> one record (or the
        job's typed error, e.g. failed(result) for a request the model run failed) per job;
        each record still reaches the log on its own. A typed error in a group is retried job by job, so it
        lands on the job that caused it. elapsed_shares(results) splits a batch's decoding time over its rows.
    read_records(path) -> [record, ...] (complete lines, for re-scoring; the file is not modified).
    writable_folder(path) -> Path: the folder, created if needed, once a file could be written in it;
        otherwise OutputFolderError (a file in its place, a read-only file system, no permission).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from asymspec_vl.core.errors import AsymSpecError, RequestFailedError

from .records import (
    ResultsFileError,
    ResumeMismatchError,
    digest,
    parse_lines,
    read_fingerprint,
    require_file,
    write_json_atomic,
)


class OutputFolderError(AsymSpecError):
    """An output folder cannot be created or written in."""


class ResultsNotKeptError(ResultsFileError):
    """A finished job's record could not be appended to the results file (a full disk, an I/O error); `record`
    is the record, whole."""

    def __init__(self, message: str, record: dict):
        super().__init__(message)
        self.record = record


def writable_folder(path: str | Path) -> Path:
    """The folder `path`, created with its parents if needed, after a probe file was written in it."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except (FileExistsError, NotADirectoryError) as e:
        blocker = next(
            (p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
            folder,
        )
        raise OutputFolderError(
            f"the output folder {folder} cannot be made: {blocker} is a file, not a folder; "
            "choose another output folder"
        ) from e
    except OSError as e:
        raise OutputFolderError(
            f"cannot write in the output folder {folder}: {_why(e)}; choose a writable "
            "output folder"
        ) from e
    return folder


def _why(e: OSError) -> str:
    """An OSError in a few words: "the file system is read-only", "no space left on device", ..."""
    if e.errno == errno.EROFS:
        return "the file system is read-only"
    return (e.strerror or str(e)).lower()


@dataclass(frozen=True)
class Job:
    id: str
    method: str
    payload: Any = None

    @property
    def key(self) -> tuple[str, str]:
        return (str(self.id), str(self.method))


def read_records(path: str | Path) -> list[dict]:
    """The complete records of a JSONL results file (a torn last line is ignored, the file untouched)."""
    p = Path(path)
    require_file(p)
    if not p.is_file():
        raise ResultsFileError(f"results file not found: {p}")
    return parse_lines(p.read_bytes(), p)[0]


class ResultsLog:
    """Append-only JSONL of finished jobs, keyed by (id, method)."""

    def __init__(self, path: str | Path, fingerprint: dict | None = None):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.fingerprint_path = self.path.with_name(
            self.path.stem + ".fingerprint.json"
        )
        self.digest = (
            digest(json.loads(json.dumps(fingerprint)))
            if fingerprint is not None
            else None
        )

    def load(self) -> dict[tuple[str, str], dict]:
        self._check_fingerprint()
        if not self.path.is_file():
            return {}
        data = self.path.read_bytes()
        records, good = parse_lines(data, self.path, self.digest)
        if good < len(
            data
        ):  # cut the torn tail so the next append starts on a fresh line
            with self.path.open("r+b") as f:
                f.truncate(good)
        elif data and not data.endswith(b"\n"):
            with self.path.open("ab") as f:
                f.write(b"\n")
        return {(rec["id"], rec["method"]): rec for rec in records}

    def done_keys(self) -> set[tuple[str, str]]:
        """Keys of the finished jobs, read without changing the file (the fingerprint is checked)."""
        self._check_fingerprint()
        if not self.path.is_file():
            return set()
        return {
            (r["id"], r["method"])
            for r in parse_lines(self.path.read_bytes(), self.path, self.digest)[0]
        }

    def append(self, record: dict) -> None:
        """One line; `record` is stamped (in place) with this log's fingerprint digest."""
        if self.digest is not None:
            record.setdefault("fingerprint", self.digest)
        line = (
            json.dumps(record, allow_nan=False) + "\n"
        )  # ASCII: any text survives any file encoding
        size = self.path.stat().st_size if self.path.is_file() else 0
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            with contextlib.suppress(OSError):  # a torn line would end the file
                os.truncate(self.path, size)
            raise ResultsNotKeptError(
                f"cannot append to {self.path} ({_why(e)}): the results before this one are kept there; "
                f"the result of id {record.get('id')!r}, method {record.get('method')!r} is printed above as "
                "its line; free space or choose another output folder, then rerun the same command to resume",
                record,
            ) from e

    def check_writable(self) -> None:
        """ResultsFileError unless a line could be appended to the file (or the file made), before any work."""
        require_file(self.path)
        try:
            if self.path.exists():
                with self.path.open("ab"):
                    pass
            else:
                writable_folder(self.path.parent)
        except OSError as e:
            raise ResultsFileError(
                f"cannot append to {self.path} ({_why(e)}): no result could be kept; make it writable or "
                "choose another output folder"
            ) from e

    @contextlib.contextmanager
    def locked(self):
        """Hold an exclusive lock on .<stem>.lock while this process writes the log (the file writable)."""
        writable_folder(self.path.parent)
        self.check_writable()
        with self.path.with_name(f".{self.path.stem}.lock").open("w") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise ResultsFileError(
                    f"another run is writing {self.path}; wait for it or use another "
                    "output folder"
                ) from e
            try:
                yield self
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _check_fingerprint(self) -> None:
        require_file(self.path)
        if self.fingerprint is None:
            return
        wanted = json.loads(json.dumps(self.fingerprint))
        if self.fingerprint_path.exists():
            stored = read_fingerprint(self.fingerprint_path)
            if stored != wanted:
                diff = sorted(
                    k
                    for k in set(stored) | set(wanted)
                    if stored.get(k) != wanted.get(k)
                )
                raise ResumeMismatchError(
                    f"{self.path} holds results made with other settings (differing: {', '.join(diff)}); "
                    "use another output folder, or delete it to start over"
                )
        elif self.path.is_file() and self.path.stat().st_size > 0:
            raise ResumeMismatchError(
                f"{self.path} has results but no {self.fingerprint_path.name}; "
                "cannot tell which settings made them: use another output folder"
            )
        else:
            writable_folder(self.path.parent)
            write_json_atomic(self.fingerprint_path, wanted)


class BatchedWork:
    """work(job) for run_jobs that decodes in batches: on a miss, the job and the next pending jobs of its
    method (up to `batch`, in job order) go to decode(group) -> [record per job]; the runner then takes
    their records one by one and writes each to disk as usual."""

    def __init__(
        self,
        jobs: Iterable[Job],
        done: set,
        batch: int,
        decode: Callable[[list[Job]], list[dict]],
    ):
        if batch < 1:
            raise ValueError(f"batch={batch} is invalid: expected an integer >= 1")
        self.batch, self.decode = batch, decode
        self.queue: dict[str, list[Job]] = {}  # method -> its pending jobs, in order
        for j in jobs:
            if j.key not in done:
                self.queue.setdefault(j.key[1], []).append(j)
        self.ready: dict[tuple[str, str], dict | AsymSpecError] = {}

    def __call__(self, job: Job) -> dict:
        if job.key not in self.ready:
            queue = self.queue[job.key[1]]
            start = next(i for i, j in enumerate(queue) if j.key == job.key)
            group = queue[start : start + self.batch]
            del queue[start : start + self.batch]
            self._run(group)
        outcome = self.ready.pop(job.key)
        if isinstance(outcome, AsymSpecError):
            raise outcome  # recorded by run_jobs on its own job
        return outcome

    def _run(self, group: list[Job]) -> None:
        try:
            records = self.decode(group)
        except AsymSpecError as e:
            if len(group) == 1:
                self.ready[group[0].key] = e
                return
            for (
                j
            ) in group:  # find the bad job: one by one, each error kept for its own job
                self._run([j])
            return
        self.ready.update((j.key, rec) for j, rec in zip(group, records))


def failed(res) -> AsymSpecError | None:
    """A result the model run failed (finish_reason "error") as its job's typed error, recorded as such by
    run_jobs; None for a finished result. decode functions return it in place of that job's record."""

    return RequestFailedError([res], [0]) if res.finish_reason == "error" else None


def elapsed_shares(results) -> list[float]:
    """Each row's share of its batch's decoding time (every GenerationResult of a batch carries the batch's
    elapsed_s), by emitted tokens, so that tokens/s pooled over rows is the batch's throughput."""
    emitted = sum(len(r.token_ids) for r in results) or 1
    return [r.stats.elapsed_s * len(r.token_ids) / emitted for r in results]


class _Progress:
    """The tqdm bar of a run; beside it the running accuracy and decoding tokens/s of the method whose job just
    finished, over that method's finished jobs (accuracy: those in the log too; tokens/s: this session's)."""

    def __init__(self, total: int, done: list[dict], desc: str, enabled: bool):

        self.correct: dict[str, int] = {}  # method -> correct answers
        self.scored: dict[str, int] = {}  # method -> scored answers
        self.tokens: dict[str, int] = {}  # method -> tokens decoded this session
        self.seconds: dict[str, float] = {}  # method -> their decoding time
        for r in done:
            self._count(r, timed=False)
        self.bar = tqdm(
            total=total,
            initial=len(done),
            desc=desc,
            disable=not enabled,
            dynamic_ncols=True,
        )

    def _count(self, rec: dict, timed: bool) -> None:
        m = str(rec.get("method"))
        if rec.get("correct") is not None:
            self.scored[m] = self.scored.get(m, 0) + 1
            self.correct[m] = self.correct.get(m, 0) + (rec["correct"] is True)
        if timed:
            stats = rec.get("stats") or {}
            self.tokens[m] = self.tokens.get(m, 0) + int(stats.get("emitted", 0))
            self.seconds[m] = self.seconds.get(m, 0.0) + float(
                stats.get("elapsed_s", 0.0)
            )

    def line(self, method: str) -> str:
        """ "asymspec: acc 91.3% of 120, 12.3 tok/s": one method's figures, never pooled over methods."""
        parts = []
        if self.scored.get(method):
            parts.append(
                f"acc {100.0 * self.correct[method] / self.scored[method]:.1f}% of {self.scored[method]}"
            )
        if self.seconds.get(method, 0.0) > 0:
            parts.append(f"{self.tokens[method] / self.seconds[method]:.1f} tok/s")
        return f"{method}: {', '.join(parts)}" if parts else method

    def update(self, rec: dict) -> None:
        self._count(rec, timed=True)
        self.bar.set_postfix_str(self.line(str(rec.get("method"))), refresh=False)
        self.bar.update(1)


def run_jobs(
    jobs: Iterable[Job],
    work: Callable[[Job], dict],
    log: ResultsLog,
    desc: str = "eval",
    progress: bool = True,
    base: Callable[[Job], dict] | None = None,
) -> list[dict]:
    """Run the jobs not yet in `log`, appending each record when done; return all records in job order.
    base(job) -> fields every record of the job carries, an error record too (e.g. its task, its answer)."""
    jobs = list(jobs)
    keys = [j.key for j in jobs]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})[:5]
        raise ValueError(f"duplicate jobs {dup}: each (id, method) must be unique")
    with log.locked():
        done = log.load()
        records = {k: done[k] for k in keys if k in done}
        bar = _Progress(len(jobs), list(records.values()), desc, progress)
        try:
            for job in jobs:
                if job.key in records:
                    continue
                start = time.perf_counter()
                try:
                    fields = dict(work(job))
                except AsymSpecError as e:
                    fields = {
                        "error": {"type": type(e).__name__, "message": str(e)},
                        "correct": False,
                    }
                fields.setdefault("wall_s", time.perf_counter() - start)
                rec = {
                    "id": job.key[0],
                    "method": job.key[1],
                    **(base(job) if base else {}),
                    **fields,
                }
                try:
                    log.append(rec)
                except (
                    ResultsNotKeptError
                ) as e:  # nothing computed is lost: the line goes to stderr
                    bar.bar.close()
                    print(json.dumps(e.record), file=sys.stderr)
                    raise
                records[job.key] = rec
                bar.update(rec)
        except (
            KeyboardInterrupt
        ):  # Ctrl-C: every finished record is on disk; say so, and how to go on
            bar.bar.close()
            print(
                f"interrupted: {len(records)} of {len(jobs)} results are kept in {log.path}; rerun the same "
                "command to resume from there",
                file=sys.stderr,
            )
            raise
        finally:
            bar.bar.close()
    return [records[k] for k in keys]


def resume_note(jobs: list[Job], done: set, path: str | Path) -> str | None:
    """What a rerun will do, in one line: "resumed: nothing to do ..." or "resumed: N of M done ...";
    None on a fresh run."""
    finished = sum(j.key in done for j in jobs)
    if not finished:
        return None
    if finished == len(jobs):
        return f"resumed: nothing to do (all {len(jobs)} results are in {path}; --out elsewhere starts afresh)"
    return f"resumed: {finished} of {len(jobs)} results are in {path}; running the other {len(jobs) - finished}"
