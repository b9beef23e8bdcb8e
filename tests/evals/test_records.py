"""evals/records.py: what a results line must hold (an outcome without its counters is refused, naming the line,
the lines before it kept) and the settings digest (the same settings in any key order are the same run)."""

import json

import pytest

from evals.records import COUNTERS, ResultsFileError, digest, parse_lines

STATS = {k: 1.0 for k in COUNTERS}
GOOD = {"id": "a", "method": "asymspec", "correct": True, "stats": STATS}


def lines(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "b", "method": "asymspec"},
        {"id": "b", "method": "asymspec", "correct": True, "stats": [3, 1.0]},
        {"id": "b", "method": "asymspec", "stats": {**STATS, "steps": "7"}},
    ],
)
def test_an_outcome_without_its_counters_is_refused_naming_its_line(tmp_path, bad):
    with pytest.raises(ResultsFileError, match=r"line 2 is no results record"):
        parse_lines(lines(GOOD, bad, GOOD), tmp_path / "results.jsonl")


def test_good_lines_and_error_lines_are_read_and_a_torn_last_line_left_out(tmp_path):
    error = {
        "id": "c",
        "method": "floor",
        "error": {"type": "X", "message": "m"},
        "correct": False,
    }
    data = lines(GOOD, error) + b'{"id": "d", "met'
    records, good = parse_lines(data, tmp_path / "results.jsonl")
    assert records == [GOOD, error] and good == len(lines(GOOD, error))


def test_the_settings_digest_does_not_depend_on_key_order():
    a = {
        "K": 4,
        "method": "asymspec",
        "config": {"beta": 0.5, "gamma": 1.0, "stop": ["x"]},
    }
    b = {
        "config": {"stop": ["x"], "gamma": 1.0, "beta": 0.5},
        "method": "asymspec",
        "K": 4,
    }
    assert digest(a) == digest(b)
    assert digest(a) != digest({**a, "K": 5}) and len(digest(a)) == 16
