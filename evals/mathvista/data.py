"""MathVista testmini problems: the vendored text data (data/) or a local annotation file, as Problem records."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from asymspec_vl.core.errors import AsymSpecError

DATA_DIR = Path(__file__).parent / "data"
FILES = {
    "annotations": "testmini.json",
    "queries": "query.json",
    "captions": "captions_bard.json",
    "ocrs": "ocrs_easyocr.json",
}
HUB_ID = "AI4Math/MathVista"
SPLIT = "testmini"


class MathVistaDataError(AsymSpecError):
    """MathVista data cannot be read (a missing or malformed annotation file)."""


@dataclass(frozen=True)
class Problem:
    """One testmini problem (fields as in MathVista's testmini.json; query = the official zero-shot prompt)."""

    pid: str
    question: str
    query: str
    answer: str
    question_type: str  # multi_choice | free_form
    answer_type: str  # text | integer | float | list
    choices: list[str] | None = None
    unit: str | None = None
    precision: int | None = None
    image: str = ""  # relative path in the annotations, e.g. "images/1.jpg"
    metadata: dict = field(
        default_factory=dict
    )  # task, category, context, grade, skills, source, language

    @property
    def task(self) -> str:
        return self.metadata.get("task", "")

    def facts(self) -> dict:
        """What scoring needs, as stored in each result line."""
        return {
            "question": self.question,
            "answer": self.answer,
            "question_type": self.question_type,
            "answer_type": self.answer_type,
            "choices": self.choices,
            "precision": self.precision,
            "unit": self.unit,
            "metadata": self.metadata,
        }


def data_files() -> dict[str, Path]:
    return {k: DATA_DIR / name for k, name in FILES.items()}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_hashes() -> dict[str, str]:
    """sha256 of each vendored text file (for the manifest)."""
    return {path.name: sha256_file(path) for path in data_files().values()}


def read_json(path: Path):
    if not path.is_file():
        raise MathVistaDataError(f"MathVista data file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MathVistaDataError(f"{path} is not valid JSON: {e}") from e


def problem_from_record(rec: dict, queries: dict[str, str] | None = None) -> Problem:
    """A Problem from a testmini record (the JSON's or the hub / parquet row's fields; the image is ignored)."""
    if not isinstance(rec, dict):
        raise MathVistaDataError(
            f"a testmini record must be a JSON object of a problem's fields, not "
            f"{type(rec).__name__} {str(rec)[:40]}"
        )
    try:
        pid = str(rec["pid"])
        precision = rec.get("precision")
        query = rec.get("query") or (queries or {}).get(pid)
        if not query:
            raise KeyError("query")
        return Problem(
            pid=pid,
            question=str(rec["question"]),
            query=str(query),
            answer=str(rec["answer"]),
            question_type=str(rec["question_type"]),
            answer_type=str(rec["answer_type"]),
            choices=[str(c) for c in rec["choices"]] if rec.get("choices") else None,
            unit=rec.get("unit") or None,
            precision=int(float(precision))
            if precision is not None and precision == precision
            else None,
            image=str(rec.get("image") or ""),
            metadata=dict(rec.get("metadata") or {}),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise MathVistaDataError(
            f"testmini record {rec.get('pid', '?')!r} lacks or mangles field {e}"
        ) from e


def load_problems(records: list[dict] | None = None) -> dict[str, Problem]:
    """pid -> Problem, from `records` (e.g. a local annotation file) or the vendored testmini.json;
    queries missing from records come from the vendored query.json."""
    queries = read_json(data_files()["queries"])
    if records is None:
        raw = read_json(data_files()["annotations"])
        records = [{"pid": pid, **rec} for pid, rec in raw.items()]
    problems = [problem_from_record(r, queries) for r in records]
    return {p.pid: p for p in sorted(problems, key=lambda p: _pid_order(p.pid))}


def read_annotation_file(path: Path) -> list[dict]:
    """Testmini records from a local JSON (a pid -> record object or a list) or JSON-lines file, each checked
    to make a Problem (an error names the file)."""
    if path.suffix == ".jsonl":
        try:
            data = [
                json.loads(line)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MathVistaDataError(f"{path} is not valid JSON lines: {e}") from e
    else:
        data = read_json(path)
    if isinstance(data, dict):
        bad = next(
            (pid for pid, rec in data.items() if not isinstance(rec, dict)), None
        )
        if bad is not None:
            raise MathVistaDataError(
                f"{path}: pid {bad!r} maps to {type(data[bad]).__name__} "
                f"{str(data[bad])[:40]}; expected a pid -> problem object"
            )
        data = [{"pid": pid, **rec} for pid, rec in data.items()]
    elif not isinstance(data, list):
        raise MathVistaDataError(
            f"{path} must hold a pid -> problem object or a list of problems, not "
            f"{type(data).__name__}"
        )
    queries = read_json(data_files()["queries"])
    for rec in data:
        try:
            problem_from_record(rec, queries)
        except MathVistaDataError as e:
            raise MathVistaDataError(f"{path}: {e}") from e
    return data


def _pid_order(pid: str):
    return (0, int(pid), "") if pid.isdigit() else (1, 0, pid)
