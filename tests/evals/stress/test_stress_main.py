"""The stress run's command line (evals/stress/__main__.py) with a stand-in case runner: which workloads it draws
(seed after seed, GPU-shaped ones by --gpu-shaped), when it stops, the totals it prints, the reproduce lines, the
exit status, the JSON lines of --out, one --workload case, and refused arguments. The cases themselves (vLLM
against transformers) run in test_stress_vllm.py."""

import dataclasses
import json
import random
import re
import types

import pytest
import torch
from asymspec_vl.evals.stress import __main__ as stress
from asymspec_vl.evals.stress import workload as workloads
from asymspec_vl.evals.stress.case import RESULT_PREFIX, CaseReport, Mismatch, served
from asymspec_vl.evals.stress.workload import RowSpec, Workload, draw, with_pair


@pytest.fixture
def ran(monkeypatch, tmp_path):
    """main() with a stand-in Reference and run_case: -> (exit status, stdout, the workloads run, here flags).
    Seeds in `bad` report one token mismatch and 2 compared requests; the others 3 compared, none bad; a
    cross-family case two vocabularies, one sampled row and its refused rows skipped by reason."""
    (tmp_path / "verifier").mkdir()
    (tmp_path / "verifier" / "config.json").write_text("{}")
    monkeypatch.setattr(
        stress, "write_tiny_models", lambda *a, **k: pytest.fail("models rewritten")
    )
    monkeypatch.setattr(
        stress, "Reference", lambda paths, pair: ("reference", paths, pair)
    )
    monkeypatch.setattr(stress.torch, "set_num_threads", lambda n: None)

    def run(argv, capsys, bad=()):
        seen = []

        def run_case(w, paths, reference, logit_steps, here=False):
            assert paths["verifier"] == tmp_path / "verifier"
            assert reference == ("reference", paths, w.engine.pair)
            seen.append((w, logit_steps, here))
            r = CaseReport(w.seed, w.to_json(), requests=len(w.rows))
            r.compared, r.logit_steps = (2, 5) if w.seed in bad else (3, 4)
            if w.seed in bad:
                r.mismatches.append(Mismatch("tokens", 1, "transformers [1] vllm [2]"))
            r.vocabulary = {"pair": w.engine.pair, "drafter": 9, "verifier": 8}
            r.vocabulary["shared"] = 7
            r.vocabulary["identity"] = w.engine.pair in ("same", "real-qwen3")
            if w.engine.pair == "cross":
                r.sampled, r.skipped = 1, {"plain": w.seed % 3, "sampled floor": 1}
            return r

        monkeypatch.setattr(stress, "run_case", run_case)
        code = stress.main(["--models", str(tmp_path), *argv])
        return code, capsys.readouterr().out, seen

    return run


def test_cases_are_drawn_seed_after_seed_and_every_second_one_gpu_shaped(ran, capsys):
    code, out, seen = ran(["--seed", "5", "--cases", "3", "--no-tp"], capsys)
    assert code == 0
    assert [w for w, _, _ in seen] == [
        with_pair(
            draw(5, tp=False, gpu_shaped=True, drafter=True), "cross"
        ),  # mix: odd seeds are GPU-shaped, every third cross-family
        draw(6, tp=False, gpu_shaped=False, drafter=True),
        draw(7, tp=False, gpu_shaped=True, drafter=True),
    ]
    assert all(steps == 6 and not here for _, steps, here in seen)
    assert out.count("\ncase ") + out.startswith("case ") == 3
    assert len(re.findall(r": OK \(\d+\.\d\d GiB resident\)\n", out)) == 3
    assert (
        "cases run: 3, requests compared: 9, logit checks: 12, mismatches: 0 in 0 case(s)"
        in out
    )
    assert out.endswith(
        "\nacross a vocabulary map: 1 case(s), 3 requests compared, 1 of them sampled; skipped: 2 plain, "
        "1 sampled floor\n"
    )  # seed 5 ran cross-family
    assert "reproduce" not in out


def test_the_summary_adds_the_cross_family_cases_sampled_rows_and_skips(ran, capsys):
    _, out, _ = ran(["--seed", "0", "--cases", "3", "--pairs", "cross"], capsys)
    assert out.endswith(
        "\nacross a vocabulary map: 3 case(s), 9 requests compared, 3 of them sampled; skipped: 3 plain, "
        "3 sampled floor\n"
    )  # plain: seeds 0, 1, 2 -> 0 + 1 + 2
    _, out, _ = ran(["--seed", "0", "--cases", "2", "--pairs", "same"], capsys)
    assert "across a vocabulary map" not in out


@pytest.mark.parametrize(
    "mode, shaped", [("only", [True, True]), ("off", [False, False])]
)
def test_gpu_shaped_only_and_off(ran, capsys, mode, shaped):
    _, _, seen = ran(["--cases", "2", "--gpu-shaped", mode, "--seed", "8"], capsys)
    assert [w for w, _, _ in seen] == [
        with_pair(draw(8, tp=True, gpu_shaped=shaped[0], drafter=True), "cross"),
        draw(9, tp=True, gpu_shaped=shaped[1], drafter=True),
    ]


def test_a_mismatch_is_counted_reproduced_and_ends_with_status_1(ran, capsys, tmp_path):
    log = tmp_path / "reports.jsonl"
    code, out, seen = ran(
        [
            "--seed",
            "11",
            "--cases",
            "2",
            "--gpu-shaped",
            "only",
            "--no-tp",
            "--logit-steps",
            "2",
            "--out",
            str(log),
        ],
        capsys,
        bad={12},
    )
    assert code == 1
    assert (
        "cases run: 2, requests compared: 5, logit checks: 9, mismatches: 1 in 1 case(s)"
        in out
    )
    assert (
        "1 MISMATCH(ES)" in out and "- tokens row 1: transformers [1] vllm [2]" in out
    )
    reproduce = [ln for ln in out.splitlines() if ln.startswith("reproduce:")]
    assert reproduce == [
        "reproduce: python -m asymspec_vl.evals.stress --seed 12 --cases 1 --gpu-shaped only --pairs mix --no-tp"
        f"   # or --workload '{seen[1][0].to_json()}'"
    ]
    reports = [
        CaseReport.from_json(line) for line in log.read_text().splitlines()
    ]  # one JSON line per case, appended
    assert [r.seed for r in reports] == [11, 12]
    assert [len(r.mismatches) for r in reports] == [0, 1]
    assert all(steps == 2 for _, steps, _ in seen)


@pytest.mark.parametrize(
    "pairs, expected",
    [
        ("same", ["same"] * 3),
        ("cross", ["cross"] * 3),
        ("mix", ["same", "same", "cross"]),
        ("real", ["real-qwen3", "real-llama3", "real-tekken"]),
    ],
)
def test_pairs_same_cross_and_every_third_case_cross_family(
    ran, capsys, pairs, expected
):
    _, _, seen = ran(["--seed", "0", "--cases", "3", "--pairs", pairs], capsys)
    assert [w.engine.pair for w, _, _ in seen] == expected
    assert [dataclasses.replace(w.engine, pair="same") for w, _, _ in seen] == [
        draw(s, tp=True, gpu_shaped=s % 2 == 1).engine for s in range(3)
    ]  # the pair changes nothing else of the draw


def test_real_pairs_run_in_turn_and_the_summary_counts_each(ran, capsys):
    """--pairs real: seed s runs REAL_ROTATION[s % 4] (its draw otherwise unchanged); each case line names the pair
    and its shared set, the summary each pair's cases, requests, checks and mismatches."""
    from asymspec_vl.evals.stress.hf_side import REAL_ROTATION

    code, out, seen = ran(
        ["--seed", "3", "--cases", "5", "--pairs", "real"], capsys, bad=(4,)
    )
    assert code == 1
    assert [w.engine.pair for w, _, _ in seen] == [
        REAL_ROTATION[s % 4] for s in range(3, 8)
    ]
    assert "  real-mistral-sp cross-family (7 shared of 9 / 8), 3/" in out
    assert "  real-qwen3 one vocabulary (7 shared), 2/" in out
    assert (
        "real-shape pairs: real-llama3 1 case(s), 3 requests, 4 logit checks, 0 mismatch(es); "
        "real-mistral-sp 2 case(s), 6 requests, 8 logit checks, 0 mismatch(es); "
        "real-qwen3 1 case(s), 2 requests, 5 logit checks, 1 mismatch(es); "
        "real-tekken 1 case(s), 3 requests, 4 logit checks, 0 mismatch(es)\n"
    ) in out
    assert "--seed 4 --cases 1 --gpu-shaped mix --pairs real" in out
    _, out, _ = ran(["--seed", "0", "--cases", "2", "--pairs", "mix"], capsys)
    assert "real-shape pairs" not in out


def test_a_cross_family_case_line_names_its_skipped_rows_and_its_vocabularies():
    w = with_pair(draw(3, tp=False, gpu_shaped=True), "cross")
    plain = sum(r.mode == "plain" for r in w.rows)
    assert plain and any(
        "temperature" in r.config for r in w.rows
    )  # this draw has both
    told = f"{plain} plain"
    assert stress.describe(w).endswith(
        f"pair=cross rows={len(w.rows)} ({'/'.join(sorted({r.mode for r in w.rows}))}), "
        f"skipped {told} (refused by the vLLM engine across a vocabulary map)"
    )
    assert "skipped" not in stress.describe(draw(3, tp=False, gpu_shaped=True))
    report = CaseReport(5, w.to_json(), requests=2, compared=2)
    report.vocabulary = {
        "drafter": 426,
        "verifier": 276,
        "shared": 200,
        "identity": False,
    }
    assert stress.line(report).startswith("cross-family (200 shared of 426 / 276), 2/2")
    report.sampled = 1
    assert stress.line(report).startswith(
        "cross-family (200 shared of 426 / 276), 2/2 requests (1 sampled), "
    )
    report.vocabulary = {**report.vocabulary, "identity": True}
    assert stress.line(report).startswith("2/2 requests (1 sampled), ")


def _cross_reference():
    """A stand-in of a cross-family Reference as `served` reads it: verifier ids 0..99 shared, 5 banned."""
    vmap = types.SimpleNamespace(identity=False, verifier_ids=torch.arange(100))
    return types.SimpleNamespace(
        vmap=vmap, pair=types.SimpleNamespace(banned_ids=lambda: [5])
    )


SAMPLING = {"temperature": 0.8, "seed": 1, "top_k": 20}


def test_sampled_rows_across_a_map_run_and_plain_rows_are_skipped():
    """Across a map every sampled row runs as it is (seeded, its filters, batched with the greedy rows): every
    method samples there; plain speculative rows are skipped and counted (the cross-family engine refuses them:
    they carry no x_comp in the drafter's ids)."""
    rows = tuple(
        RowSpec(m, 2, 8, i, config=SAMPLING)
        for i, m in enumerate(workloads.SAMPLED_MODES)
    )
    rows += (
        RowSpec("plain", 2, 8, 9),
        RowSpec("floor", 2, 8, 9),
        RowSpec("plain", 2, 8, 3),
    )
    w = with_pair(Workload(0, workloads.EngineCase(), rows), "cross")
    ran, skipped = served(w, _cross_reference())
    assert ran.rows == tuple(r for r in rows if r.mode != "plain")
    assert set(workloads.SAMPLED_MODES) <= {r.mode for r in ran.rows if r.config}
    assert skipped == {"plain": 2}
    assert stress.skips(w) == (
        ", skipped 2 plain (refused by the vLLM engine across a vocabulary map)"
    )


def _old_sampled_rows(w: Workload) -> list[tuple[int, int]]:
    """(row, seed) of the rows the GPU-shaped draw made sample before floor rows and filters were drawn: 40 % of
    asymspec, sd and scd rows, from the draw's own generator."""
    rng = random.Random(f"gpu-shaped-{w.seed}")
    if (
        w.engine.max_num_batched_tokens in workloads.GPU_BUDGETS
    ):  # the engine draws came first
        rng.random(), rng.choice((16, 16, 32, 128)), rng.choice(workloads.GPU_BUDGETS)
        rng.choice(workloads.GPU_MAX_NUM_SEQS), rng.random()
    out = []
    for i, r in enumerate(draw(w.seed, tp=False).rows):
        if r.mode in ("asymspec", "sd", "scd") and rng.random() < 0.4:
            out.append((i, rng.randrange(10**6)))
    return [(i, s) for i, s in out if i < len(w.rows)]


def test_gpu_shaped_draws_sample_floor_rows_and_filters_and_keep_the_older_draws():
    """Sampled rows of every SAMPLED_MODES mode, some with top-k / top-p / min-p; the asymspec, sd and scd rows
    that sampled before (and their seeds) are the same: an older seed's reproduce line still draws its rows."""
    seen, filters = set(), set()
    for seed in range(40):
        w = draw(seed, tp=False, gpu_shaped=True)
        now = [
            (i, r.config["seed"])
            for i, r in enumerate(w.rows)
            if "temperature" in r.config and r.mode != "floor"
        ]
        assert now == _old_sampled_rows(w), seed
        for r in w.rows:
            if "temperature" in r.config:
                assert (
                    r.config["temperature"] == 0.8 and r.mode in workloads.SAMPLED_MODES
                )
                seen.add(r.mode)
                filters |= {k for k in ("top_k", "top_p", "min_p") if k in r.config}
        assert w == draw(seed, tp=False, gpu_shaped=True)  # drawn again: the same
    assert seen == set(workloads.SAMPLED_MODES) and filters == {
        "top_k",
        "top_p",
        "min_p",
    }


def test_no_case_starts_after_the_time_is_up(ran, capsys):
    code, out, seen = ran(["--seconds", "0"], capsys)
    assert (code, seen) == (0, []) and "cases run: 0," in out


def test_one_workload_runs_here_and_prints_its_report(ran, capsys):
    w = draw(3, tp=True)
    code, out, seen = ran(["--workload", w.to_json()], capsys, bad={3})
    assert code == 1 and seen == [(w, 6, True)]
    line = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
    report = CaseReport.from_json(line[0][len(RESULT_PREFIX) :])
    assert Workload.from_json(report.workload) == w and report.compared == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpu-shaped", "sometimes"],
        ["--cases", "two"],
        ["--seconds", "soon"],
        ["--seed"],
    ],
)
def test_bad_arguments_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        stress.main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_case_line_and_the_workload_description_read_their_numbers():
    w = draw(4, tp=False, gpu_shaped=True)
    text = stress.describe(w)
    e = w.engine
    assert text.startswith(f"seed=4 block={e.block_size} K={e.K} seqs={e.max_num_seqs}")
    assert f"compiled={e.compiled} pair=same rows={len(w.rows)} (" in text
    report = CaseReport(4, w.to_json(), requests=7, compared=6, logit_steps=12)
    report.max_error = {"a": 2.5e-6, "b": 1e-7}
    report.resumptions, report.seconds = 3, {"engine": 12.4, "reference": 3.6}
    assert stress.line(report) == (
        "6/7 requests, 12 logit checks (max rel. error a 2.5e-06 b 1.0e-07), 3 resumptions, "
        "12 s vLLM + 4 s transformers: OK"
    )
    report.mismatches = [Mismatch("a", 0, "x"), Mismatch("b", 1, "y")]
    assert stress.line(report).endswith(": 2 MISMATCH(ES)")
    report.drafter = 3
    assert stress.line(report).startswith("6/7 requests (3 drafter alone), 12 logit")
    report.sampled, report.max_error["logprobs"] = 2, 4e-6
    assert stress.line(report).startswith(
        "6/7 requests (2 sampled, 3 drafter alone), 12 logit checks (max rel. error a 2.5e-06 b 1.0e-07 "
        "logprobs 4.0e-06)"
    )
    assert stress.drafter_alone([report, CaseReport(5, "{}"), report]) == (
        "drafter alone: 6 rows compared in 2 case(s), largest logprob error 4.0e-06\n"
    )
    assert stress.drafter_alone([CaseReport(5, "{}")]) == ""


def test_the_models_are_written_only_where_they_are_missing(monkeypatch, tmp_path):
    written = []
    monkeypatch.setattr(
        stress, "write_tiny_models", lambda root, seed: written.append((root, seed))
    )
    paths = stress.model_paths(tmp_path)
    assert written == [(tmp_path, 0)]
    assert paths == {
        "root": tmp_path,
        "verifier": tmp_path / "verifier",
        "vl_drafter": tmp_path / "vl_drafter",
    }
    (tmp_path / "verifier").mkdir()
    (tmp_path / "verifier" / "config.json").write_text(json.dumps({}))
    stress.model_paths(tmp_path)
    assert len(written) == 1
