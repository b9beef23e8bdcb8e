"""The doctor's shared pieces (doctor/cases.py) and its per-backend check plumbing (doctor/checks.py): the report
row, the requests every check decodes, the comparison that decides a method row, the guard that turns a check's
exception into its failed rows, and the preemption row's skip. A wrong comparison here would pass a broken path
on every backend, so each rule is pinned to a case that breaks it."""

from types import SimpleNamespace

import pytest

from asymspec_vl.core.loop import RowOutput
from asymspec_vl.core.trace import Stats
from asymspec_vl.doctor.backends import RUNS
from asymspec_vl.doctor.cases import Check, compare, requests, summary
from asymspec_vl.doctor.checks import guarded, preemption_check

EXACT = next(r for r in RUNS if r.backend == "CPU_ATTN")  # float32
BF16 = next(r for r in RUNS if r.dtype == "bfloat16" and r.block_size == 16)
BIG_BLOCKS = next(r for r in RUNS if r.block_size != 16)


def row(tokens, sources=None, steps=2, accepted=1, finish="length", error=""):
    return RowOutput(
        list(tokens),
        list(sources or ["draft"] * len(tokens)),
        Stats(steps=steps, accepted=accepted, emitted=len(tokens)),
        finish,
        error,
    )


def test_a_check_row_reads_its_result():
    assert (
        Check.of("x", "b", True, "d").result == "ok"
        and not Check.of("x", "b", True, "d").failed
    )
    assert Check.of("x", "b", False, "d").failed
    skipped = Check("x", "b", "skipped", "no GPU")
    assert not skipped.failed and skipped.as_dict() == {
        "name": "x",
        "backend": "b",
        "result": "skipped",
        "detail": "no GPU",
        "ok": False,
    }
    assert Check.of("x", "b", True, "d").as_dict()["ok"] is True


def test_the_requests_are_five_image_sizes_and_one_text_only_request():
    reqs = requests()
    assert len(reqs) == 6
    images, text = reqs[:5], reqs[5]
    assert (
        all(r.image is not None for r in images)
        and len({r.image.size for r in images}) == 5
    )
    assert (
        text.image is None
        and text.full_context
        and text.compressed_context
        and text.full_context != text.compressed_context
    )
    again = requests()  # seeded: every backend decodes the same requests
    assert [r.image.tobytes() for r in again[:5]] == [r.image.tobytes() for r in images]
    assert [r.question for r in again] == [r.question for r in reqs]


def test_summary_reads_tokens_sources_steps_and_accepted_of_both_result_kinds():
    out = row([1, 2, 3], ["verifier", "draft", "fused"], steps=2, accepted=1)
    assert summary([out]) == [([1, 2, 3], ["verifier", "draft", "fused"], 2, 1)]
    traced = SimpleNamespace(
        token_ids=(1, 2),
        trace=[SimpleNamespace(source="draft"), SimpleNamespace(source="bonus")],
        stats=Stats(steps=1, accepted=1),
    )
    assert summary([traced]) == [([1, 2], ["draft", "bonus"], 1, 1)]


@pytest.mark.parametrize(
    "change",
    [
        dict(tokens=[1, 2, 4]),  # another token
        dict(
            sources=["draft", "draft", "verifier"]
        ),  # the same tokens from another source (a gate decision)
        dict(steps=3),  # the same tokens in another number of steps
        dict(accepted=2),
    ],
)
def test_float32_requires_every_request_equal_in_tokens_sources_and_steps(change):
    expected = [row([5, 6]), row([1, 2, 3], ["draft", "draft", "fused"])]
    got = [
        row([5, 6]),
        row(**{"tokens": [1, 2, 3], "sources": ["draft", "draft", "fused"], **change}),
    ]
    check = compare("asymspec K=2", EXACT, got, expected)
    assert (
        check.failed and check.detail == "1/2 requests equal (tokens, sources, steps)"
    ), check
    assert compare("asymspec K=2", EXACT, expected, expected).result == "ok"


def test_bf16_reports_the_count_and_a_failed_request_fails_in_any_precision():
    expected = [row([5, 6]), row([1, 2, 3])]
    differ = compare("asymspec K=2", BF16, [row([5, 6]), row([1, 2, 4])], expected)
    assert (
        differ.result == "ok"
        and differ.detail
        == "1/2 requests equal (tokens, sources, steps) (bf16: reported, not required)"
    )
    errored = [row([5, 6]), row([], finish="error", error="engine died")]
    for run in (EXACT, BF16):
        check = compare("asymspec K=2", run, errored, expected)
        assert check.failed and check.detail == "1 request(s) failed: engine died", (
            check
        )


def test_guarded_turns_an_exception_into_a_failed_row_per_name_and_passes_results_through():
    def broken(*args):
        raise RuntimeError("the engine died")

    rows = guarded(["a", "b"], EXACT, broken, 1, 2)
    assert [(c.name, c.result, c.backend) for c in rows] == [
        ("a", "failed", "CPU_ATTN"),
        ("b", "failed", "CPU_ATTN"),
    ]
    assert rows[0].detail == "RuntimeError: the engine died"
    one = Check.of("a", "CPU_ATTN", True, "fine")
    assert guarded(["a"], EXACT, lambda x: one, 0) == [
        one
    ]  # a single Check becomes a list
    assert guarded(["a", "b"], EXACT, lambda: [one, one]) == [one, one]


def test_the_preemption_row_is_skipped_on_a_large_block_run_without_starting_an_engine():
    check = preemption_check(None, None, BIG_BLOCKS)  # None: any engine use would raise
    assert (
        check.result == "skipped"
        and check.detail == "checked on this backend's block-size-16 run"
    )


def test_progress_lines_go_to_stderr_with_the_minutes_since_the_start(
    capsys, monkeypatch
):
    import time

    from asymspec_vl.doctor import cases

    monkeypatch.setattr(cases, "START", [time.monotonic() - 90])
    cases.say("CPU_ATTN: asymspec K=2 ...")
    out = capsys.readouterr()
    assert (
        out.out == "" and out.err == "doctor [ 1.5 min]: CPU_ATTN: asymspec K=2 ...\n"
    ), out
