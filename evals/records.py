"""What a results line must hold, the fingerprint it carries, and the fingerprint file written whole or not at all.

A record (one JSON line of results.jsonl) holds "id" and "method" (text); then either an error, {"error": {"type",
"message"}, "correct": false}, or an outcome whose "correct" is true, false or null (not scored) and whose
"stats" is an object whose counters emitted, elapsed_s, steps, drafted, accepted, where present, are numbers (an
outcome without "correct" or without "stats", e.g. a line of only "id" and "method", is refused: adopted, it would
move every table). A file holds one record per (id, method): a second line of the same pair is refused, naming
both lines (read twice, it would be counted twice). What a benchmark's own
re-scoring needs is checked by its scorer (e.g. mathvista/cli.check_record). Every line a ResultsLog with a
fingerprint writes also carries "fingerprint": the digest of the settings that made it, so a results file copied
from a run with other settings is refused line by line, not adopted. Lines written before records carried a digest
have none and are read as they are (their folder's fingerprint file speaks for them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from asymspec_vl.core.errors import AsymSpecError

COUNTERS = ("emitted", "elapsed_s", "steps", "drafted", "accepted")


class ResultsFileError(AsymSpecError):
    """A results file is corrupt (a broken line before the end, a record missing its fields, a torn fingerprint
    file), is not a file, or is being written by another run."""


class ResumeMismatchError(AsymSpecError):
    """The results in an output folder were made with other settings than the current run's."""


def digest(fingerprint: dict) -> str:
    """A short stable digest of a fingerprint (its canonical JSON)."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[
        :16
    ]


def problem(rec: dict) -> str | None:
    """What is wrong with a record, in words; None for a good one."""
    for key in ("id", "method"):
        if not isinstance(rec.get(key), str):
            return f'its "{key}" is {_shown(rec, key)}, expected text'
    if "error" in rec:
        error = rec["error"]
        if not (
            isinstance(error, dict)
            and isinstance(error.get("type"), str)
            and isinstance(error.get("message"), str)
        ):
            return (
                f'its "error" is {_shown(rec, "error")}, expected {{"type", "message"}}'
            )
        return None
    if "correct" not in rec or not (
        rec["correct"] is None or isinstance(rec["correct"], bool)
    ):
        return (
            f'its "correct" is {_shown(rec, "correct")}, expected true, false or null'
        )
    stats = rec.get("stats")
    if not isinstance(
        stats, dict
    ):  # an outcome without its counters would move every table's figures
        return f'its "stats" is {_shown(rec, "stats")}, expected an object of counters'
    bad = [
        k
        for k in COUNTERS
        if k in stats
        and (isinstance(stats[k], bool) or not isinstance(stats[k], (int, float)))
    ]
    if bad:
        return f"its stats {', '.join(bad)} are not numbers"
    return None


def _shown(rec: dict, key: str) -> str:
    return "missing" if key not in rec else json.dumps(rec[key])[:40]


def parse_lines(
    data: bytes, path: Path, wanted: str | None = None
) -> tuple[list[dict], int]:
    """The complete records, and the byte length of the prefix they fill (a torn last line is left out).
    wanted: the digest of this run's fingerprint, which a line's own "fingerprint" must equal."""
    records, pos = [], 0
    lines: dict[tuple[str, str], int] = {}  # (id, method) -> the line that holds it
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        raw = data[pos:end]
        if raw.strip():
            line = data.count(b"\n", 0, pos) + 1
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                if end >= len(
                    data
                ):  # the last line, torn by a crash mid-write: leave it out
                    return records, pos
                raise ResultsFileError(
                    f"{path}: line {line} is not a JSON record ({e}); the file is corrupt: "
                    "fix or remove that line"
                ) from e
            _check_line(rec, path, line, wanted)
            first = lines.setdefault((rec["id"], rec["method"]), line)
            if first != line:
                raise ResultsFileError(
                    f"{path}: line {line} repeats the record of id {rec['id']!r}, method "
                    f"{rec['method']!r} (line {first}); a results file holds one line per id and method: "
                    "remove one of them"
                )
            records.append(rec)
        pos = end
    return records, pos


def _check_line(rec: dict, path: Path, line: int, wanted: str | None) -> None:
    wrong = problem(rec)
    if wrong:
        raise ResultsFileError(
            f"{path}: line {line} is no results record: {wrong}; fix or remove that line"
        )
    made_by = rec.get("fingerprint")
    if wanted is not None and made_by is not None and made_by != wanted:
        raise ResumeMismatchError(
            f"{path}: line {line} was made with other settings (fingerprint {made_by}, this "
            f"run's {wanted}); use another output folder, or delete it to start over"
        )


def require_file(path: Path) -> None:
    """ResultsFileError when something other than a regular file stands at `path` (a folder, a FIFO)."""
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise ResultsFileError(
            f"{path} is {kind}, not a results file: move it away or choose another output folder"
        )


def read_fingerprint(path: Path) -> dict:
    """The stored fingerprint; ResultsFileError naming the file when it is torn, edited or no JSON object."""
    require_file(path)
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ResultsFileError(
            f"{path} cannot be read ({e}): it was cut short or edited; restore it, or use "
            "another output folder"
        ) from e
    if not isinstance(stored, dict):
        raise ResultsFileError(
            f"{path} holds {type(stored).__name__}, not the settings of a run: restore it, or "
            "use another output folder"
        )
    return stored


def write_json_atomic(path: Path, value) -> None:
    """Write `value` as JSON to `path` whole: a temporary file in the same folder, synced, then renamed over it
    (a crash leaves the old file or the new one, never half of one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(value, indent=2, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
