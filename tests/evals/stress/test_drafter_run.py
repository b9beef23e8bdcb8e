"""The drafter alone in the stress test (evals/stress/drafter_run.py, workload.drafter_rows, case.compare_logprobs):
its rows drawn from their own generator (the other rows as they were), run after the speculative engine's rows on
the drafter's plain engine, compared by tokens and logprobs, a planted mismatch reported. Stand-in engines here;
a real drafter engine in test_stress_vllm.py."""

import dataclasses
import math
import types

import pytest
import torch
from asymspec_vl.evals.stress import case, drafter_run
from asymspec_vl.evals.stress.case import CaseReport, compare_logprobs, run_case
from asymspec_vl.evals.stress.engine_run import EngineRun
from asymspec_vl.evals.stress.workload import (
    DRAFTER,
    DRAFTER_LOGPROBS,
    EngineCase,
    RowSpec,
    Workload,
    draw,
)

from asymspec_vl.core import trace as T
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.logprobs import TokenLogprob
from asymspec_vl.core.loop import RowOutput


def test_drafter_rows_come_from_their_own_generator_and_leave_the_other_rows_as_they_were():
    """Half the seeds add 2 to max_num_seqs + 2 drafter rows after the others (which equal the draw without them):
    image and text-only, greedy and seeded sampled with each filter, every one asking for logprobs."""
    added, images, sampled, filters, batched = 0, set(), 0, set(), 0
    for seed in range(40):
        for shaped in (False, True):
            old = draw(seed, tp=False, gpu_shaped=shaped)
            w = draw(seed, tp=False, gpu_shaped=shaped, drafter=True)
            assert w.rows[: len(old.rows)] == old.rows and w.engine == old.engine
            own = w.rows[len(old.rows) :]
            assert all(r.mode == DRAFTER for r in own)
            assert not own or 2 <= len(own) <= w.engine.max_num_seqs + 2
            added += bool(own)
            batched += len(own) > w.engine.max_num_seqs
            for r in own:
                assert r.config["logprobs"] in DRAFTER_LOGPROBS
                images.add(r.image)
                if "temperature" in r.config:
                    sampled += 1
                    assert r.config["temperature"] == 0.8 and "seed" in r.config
                    filters |= {k for k in ("top_k", "top_p", "min_p") if k in r.config}
            assert w == draw(seed, tp=False, gpu_shaped=shaped, drafter=True)
    assert 20 <= added <= 60 and batched > 0 and images == {True, False}
    assert sampled > 0 and filters == {"top_k", "top_p", "min_p"}


def _lp(token, top, shift=0.0):
    return TokenLogprob(
        token, -1.0 - shift, [(t, -1.0 - i - shift) for i, t in enumerate(top)], "q"
    )


def _row(tokens, logprobs=None):
    return RowOutput(
        tokens,
        ["q"] * len(tokens),
        T.Stats(steps=len(tokens), emitted=len(tokens)),
        "length",
        logprobs=logprobs,
    )


ROWS = (
    RowSpec("asymspec", 2, 4, 1),
    RowSpec(DRAFTER, 2, 3, 2, config={"logprobs": 2}),
    RowSpec("sd", 2, 4, 3),
    RowSpec(DRAFTER, 2, 3, 4, config={"logprobs": 2, "temperature": 0.8, "seed": 3}),
)


@pytest.fixture
def stand_ins(monkeypatch):
    """run_case on stand-in engines and a stand-in one-vocabulary reference: -> the rows each engine was given.
    Every row answers [7, 8] (logprobs [7 then 8] over tops [7, 9] / [8, 9]) on both sides unless `planted` says
    which row's vLLM answer to move: "token" (its second token) or "logprob" (every logprob by 1e-2)."""
    given, planted = {}, {}

    def answer(row, i, vllm):
        wrong = planted.get(i) if vllm else None
        tokens = [7, 9] if wrong == "token" else [7, 8]
        if row.mode != DRAFTER:
            return _row(tokens)
        shift = 1e-2 if wrong == "logprob" else 0.0
        return _row(tokens, [_lp(t, [t, 9], shift) for t in tokens])

    def engine(name):
        def run(w, pair, paths, encs, **kw):
            given[name] = (w.rows, encs)
            rows = [answer(r, enc, True) for r, enc in zip(w.rows, encs)]
            return EngineRun(rows, [[] for _ in rows])

        return run

    monkeypatch.setattr(drafter_run, "run_on_engine", engine("speculative"))
    monkeypatch.setattr(drafter_run, "run_drafter", engine("drafter"))
    monkeypatch.setattr(
        case, "encode_request", lambda request, *a: ROWS_BY_SEED[request]
    )
    monkeypatch.setattr(case, "make_request", lambda r: r.request_seed)
    reference = types.SimpleNamespace(
        name="same",
        paths={},
        pair=types.SimpleNamespace(processor=None, tokenizer=None, cross_map=None),
        vmap=types.SimpleNamespace(identity=True),
        vocabulary=lambda: {"identity": True},
        alone=lambda row, i: answer(row, i, False),
    )
    return given, planted, reference


ROWS_BY_SEED = {
    r.request_seed: i for i, r in enumerate(ROWS)
}  # the stand-in encoding: the row's index


def test_drafter_rows_run_on_their_engine_after_the_others_and_are_compared(stand_ins):
    given, _, reference = stand_ins
    report = run_case(Workload(1, EngineCase(), ROWS), {}, reference, logit_steps=2)
    assert given["speculative"] == ((ROWS[0], ROWS[2]), [0, 2])
    assert given["drafter"] == ((ROWS[1], ROWS[3]), [1, 3])
    assert report.compared == 4 and report.drafter == 2 and report.sampled == 1
    assert not report.mismatches
    assert report.logit_steps == 4 and report.max_error["logprobs"] == 0.0


@pytest.mark.parametrize("wrong", ["token", "logprob"])
def test_a_planted_mismatch_in_a_drafter_row_is_reported(stand_ins, wrong):
    _, planted, reference = stand_ins
    planted[3] = wrong
    report = run_case(Workload(1, EngineCase(), ROWS), {}, reference, logit_steps=2)
    got = [(m.what, m.row) for m in report.mismatches]
    if wrong == "token":  # its tokens and the second token's logprob entry
        assert got == [("tokens", 3), ("logprobs", 3)]
        assert "token 1" in report.mismatches[1].detail
    else:
        assert (
            got == [("logprobs", 3)] and "relative error" in report.mismatches[0].detail
        )
        assert report.max_error["logprobs"] == pytest.approx(
            1e-2 / 2
        )  # of its largest |logprob|, 2


def test_an_engine_without_rows_is_not_started_and_the_drafters_failure_is_named(
    monkeypatch,
):
    calls, run_drafter = [], drafter_run.run_drafter

    def failing(w, pair, paths, encs):
        calls.append(w.rows)
        return EngineRun([None] * len(w.rows), [[] for _ in w.rows], error="E: dead")

    monkeypatch.setattr(drafter_run, "run_on_engine", pytest.fail)
    monkeypatch.setattr(drafter_run, "run_drafter", failing)
    w = Workload(1, EngineCase(), (ROWS[1], ROWS[3]))
    run = drafter_run.run_engines(w, None, {}, [1, 3])
    assert calls == [w.rows] and run.rows == [None, None]
    assert run.error == "drafter engine: E: dead"
    with pytest.raises(ConfigError, match="drafter rows only"):
        run_drafter(
            dataclasses.replace(w, rows=ROWS[:1]),
            None,
            {"vl_drafter": "d", "verifier": "v"},
            [0],
        )


def test_logprobs_are_compared_by_ids_exactly_and_by_value_within_the_tolerance():
    def report_of(expected, got):
        r = CaseReport(0, "{}")
        compare_logprobs(r, 5, expected, got)
        return r

    same = [_lp(3, [3, 4]), _lp(4, [4, 3])]
    assert (
        not report_of(same, same).mismatches and report_of(None, None).logit_steps == 0
    )
    assert (
        report_of(same, [_lp(3, [3, 4]), _lp(4, [4, 3], 1e-7)]).max_error["logprobs"]
        > 0
    )
    for got in (
        None,
        same[:1],
        [_lp(3, [3, 4]), _lp(4, [3, 4])],
        [_lp(3, [3, 4]), _lp(4, [4, 3], math.nan)],
    ):
        bad = report_of(same, got).mismatches
        assert [(m.what, m.row) for m in bad] == [("logprobs", 5)], got
    assert [
        m.what
        for m in report_of(same, [_lp(3, [3, 4]), _lp(4, [4, 3], 1e-3)]).mismatches
    ] == ["logprobs"]


def test_a_peaked_rows_logprobs_near_zero_keep_their_logits_rounding():
    """Found by the stress run (seed 104, --pairs mix --no-tp, cross-family): a sampled drafter row whose tokens
    all had logprobs within 3.5e-3 of 0 and equal to 3.6e-7 nats read 1.02e-4 relative to its largest |logprob|;
    its error is measured against at least 1 nat, and a 1e-4 nat error there still fails."""
    from asymspec_vl.evals.stress.case import logprob_error

    peaked = [TokenLogprob(t, -3.5e-3 / (t + 1), [], "q") for t in range(9)]
    rounded = [dataclasses.replace(e, logprob=e.logprob + 3.6e-7) for e in peaked]
    r = CaseReport(0, "{}")
    compare_logprobs(r, 2, peaked, rounded)
    assert not r.mismatches and r.max_error["logprobs"] == pytest.approx(3.6e-7)
    off = [dataclasses.replace(e, logprob=e.logprob + 2e-4) for e in peaked]
    compare_logprobs(r, 2, peaked, off)
    assert [m.what for m in r.mismatches] == ["logprobs"]
    x = torch.tensor([[-3.0, -0.5]], dtype=torch.float64)
    assert logprob_error(x + 3e-6, x) == pytest.approx(1e-6)
    assert math.isinf(logprob_error(x * math.nan, x))
