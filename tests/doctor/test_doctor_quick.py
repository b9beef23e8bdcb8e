"""`asymspec-vl doctor --quick` (asymspec_vl/doctor/quick.py) on fakes: its steps run in the issue's order, each row
is printed (stdout) and announced (stderr) as its step finishes, before the next step starts, a failing or crashing
step fails its rows and the exit code while the others still run, --json is rewritten after each step; the memory
rows read the benchmark's table against the bound; the compile-key row fails when the key leaves out the version or
the layout; and --quick refuses --speed."""

import json

import pytest

from asymspec_vl.doctor import quick
from asymspec_vl.doctor.cases import Check

ORDER = [
    "the gate kernel against float64",
    "the sampler's peak memory per rule",
    "vLLM's Triton top-k / top-p against our filter",
    "the compile-cache key",
    "a compiled engine first traced at the whole budget",
    "one cross-family pair",
]


def test_the_steps_run_in_the_issues_order():
    assert [s.title for s in quick.STEPS] == ORDER


@pytest.fixture
def fake_machine(monkeypatch, tmp_path):
    """run_quick without vLLM engines: no tiny pair written, the exact run fixed, each step a fake."""
    from asymspec_vl.doctor.backends import RUNS

    monkeypatch.setattr(quick, "write_tiny_models", lambda *a, **k: {})
    monkeypatch.setattr(quick, "exact_run", lambda platform: RUNS[0])
    return tmp_path / "quick.json"


def fake_steps(monkeypatch, capsys, outcomes):
    """STEPS replaced by steps that record what was printed when they started; outcomes: 'ok', 'failed', 'raise'."""
    seen = []

    def step(i, outcome):
        def rows(machine):
            seen.append(
                capsys.readouterr()
            )  # what earlier steps printed, read before this step runs
            if outcome == "raise":
                raise RuntimeError(f"step {i} broke")
            return [Check.of(f"row {i}", "-", outcome == "ok", f"detail {i}")]

        return quick.Step(f"step {i}", [f"row {i}"], rows)

    monkeypatch.setattr(
        quick, "STEPS", tuple(step(i, o) for i, o in enumerate(outcomes))
    )
    return seen


def test_each_row_is_printed_as_its_step_finishes(monkeypatch, capsys, fake_machine):
    seen = fake_steps(monkeypatch, capsys, ["ok", "ok", "ok"])
    assert quick.run_quick(str(fake_machine), lambda: [("python", "3")]) == 0
    # before step 1 ran, step 0's row was on stdout and its progress line on stderr
    assert "| row 0 | - | ok | detail 0 |" in seen[1].out
    assert "doctor [" in seen[1].err and "row 0: ok" in seen[1].err
    assert "row 1" not in seen[1].out
    end = capsys.readouterr()
    assert (
        "| row 2 | - | ok | detail 2 |" in end.out
        and "3/3 quick checks passed" in end.out
    )
    assert "doctor [" not in end.out  # progress on stderr only
    report = json.loads(fake_machine.read_text())
    assert [c["name"] for c in report["checks"]] == ["row 0", "row 1", "row 2"]
    assert report["environment"] == [["python", "3"]]


def test_a_failing_or_crashing_step_fails_the_run_and_the_others_still_run(
    monkeypatch, capsys, fake_machine
):
    seen = fake_steps(monkeypatch, capsys, ["ok", "failed", "raise", "ok"])
    assert quick.run_quick(str(fake_machine), lambda: []) == 1
    out = "".join(s.out for s in seen) + capsys.readouterr().out
    assert "| row 1 | - | FAILED | detail 1 |" in out
    assert "| row 2 | CPU_ATTN | FAILED | RuntimeError: step 2 broke |" in out
    assert "| row 3 | - | ok |" in out and "2/4 quick checks passed, 2 failed" in out


def test_a_cut_run_leaves_the_rows_it_saw_in_the_json(
    monkeypatch, capsys, fake_machine
):
    """The JSON is rewritten after every step: a run killed in step 2 leaves steps 0 and 1."""

    class Cut(BaseException):
        pass

    fake_steps(monkeypatch, capsys, ["ok", "failed"])

    def killed(machine):
        raise Cut

    monkeypatch.setattr(
        quick, "STEPS", (*quick.STEPS, quick.Step("cut", ["row 2"], killed))
    )
    with pytest.raises(Cut):
        quick.run_quick(str(fake_machine), lambda: [])
    report = json.loads(fake_machine.read_text())
    assert [(c["name"], c["result"]) for c in report["checks"]] == [
        ("row 0", "ok"),
        ("row 1", "failed"),
    ]


TABLE = """| family | rule | logprobs | before blocks | before MiB | after blocks | after MiB | rows per chunk |
|---|---|---|---|---|---|---|---|
| same | asymspec sampled | - | 60.3 | 60.3 | 11.3 | 11.3 | 12 |
| cross | asymspec sampled | 20 | 58.7 | 58.7 | 11.1 | 11.1 | 12 |
| same | scd sampled | 20 | 59.3 | 59.3 | 16.5 | 16.5 | 12 |
"""


def test_the_memory_rows_hold_each_rules_worst_peak_to_the_bound():
    rows = {c.name: c for c in quick.memory_checks(TABLE, "cuda")}
    assert rows["sampler peak memory: asymspec sampled"].result == "ok"
    assert "11.3 [64, V]" in rows["sampler peak memory: asymspec sampled"].detail
    assert rows["sampler peak memory: scd sampled"].failed  # 16.5 > 16
    (empty,) = quick.memory_checks("Traceback ...", "cuda")
    assert empty.failed and "no table" in empty.detail


def test_the_topk_row_reports_vllms_difference_and_requires_our_filter_on_seeded_rows(
    monkeypatch,
):
    found = {
        "device": "cpu",
        "vocab": 64,
        "rows": 8,
        "differing_rows": 5,
        "seeded_kept_equal": True,
        "seeded_tokens_equal": True,
    }
    machine = quick.Machine({}, None, False)
    monkeypatch.setattr(quick, "_run_module", lambda *a: "log\n" + json.dumps(found))
    (row,) = quick.topk_rows(machine)
    assert row.result == "ok" and "5/8 rows" in row.detail
    found["seeded_tokens_equal"] = False
    assert quick.topk_rows(machine)[0].failed


@pytest.mark.vllm
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the interpreter's
def test_the_topk_check_fails_when_seeded_rows_meet_no_filter_of_ours(monkeypatch):
    """The check itself (Triton's interpreter, V = 1,024): with our filter the seeded batch keeps our set; with
    vLLM's PyTorch filter made a pass-through (as if the hook filtered nothing), it does not."""
    import vllm.v1.sample.ops.topk_topp_sampler as ops

    from asymspec_vl.doctor import topk_filter

    monkeypatch.setattr(
        ops, "HAS_TRITON", ops.HAS_TRITON
    )  # compare() sets vLLM's GPU dispatch: undone after
    monkeypatch.setattr(ops, "apply_top_k_top_p_triton", None, raising=False)
    good = topk_filter.compare(1024)
    assert good["seeded_kept_equal"] and good["seeded_tokens_equal"]
    assert good["differing_rows"] >= 2  # vLLM's Triton rule is another
    monkeypatch.setattr(ops, "apply_top_k_top_p_pytorch", lambda logits, k, p: logits)
    bad = topk_filter.compare(1024)
    assert not bad["seeded_kept_equal"]


@pytest.mark.vllm
def test_the_compile_key_row_fails_when_the_key_leaves_out_the_version_or_the_layout(
    tiny_models, monkeypatch
):
    """A key that ignores the asymspec-vl version (or the drafter's layout) would replay an old graph: the row
    fails; the real key passes."""
    from asymspec_vl.doctor.compile_key import compile_key_check
    from vllm_patches.hooks import config_patch

    assert compile_key_check(tiny_models).result == "ok"
    real = config_patch.compile_key_factors
    for dropped in (
        lambda: config_patch.asymspec_vl_version(),
        lambda: "drafter-trace-layout",
    ):
        monkeypatch.setattr(
            config_patch,
            "compile_key_factors",
            lambda d=dropped: [f for f in real() if not f.startswith(d())],
        )
        bad = compile_key_check(tiny_models)
        assert bad.failed and "3/4 distinct keys" in bad.detail, bad


def test_quick_and_speed_are_refused_together():
    from asymspec_vl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["doctor", "--quick", "--speed"])
    assert e.value.code == 2
