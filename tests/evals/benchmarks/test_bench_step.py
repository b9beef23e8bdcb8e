"""evals/benchmarks/bench_step.py on the tiny models: every requested token is generated, the printed split of a
step's time adds up (parts to the total, percentages to 100), MAL is tokens over steps, and the table of step time
by generated length has one row per bucket, the from-scratch column filled unless skipped; bad counts are
argument errors. Never timed."""

import re

import pytest
from asymspec_vl.evals.benchmarks import bench_step

PARTS = [
    "drafter x_full (K steps)",
    "base pass (drafter on x_comp)",
    "verifier pass",
    "gate + fusion",
]


def test_buckets_average_each_steps_time_under_the_length_it_reached():
    # steps ending at lengths 1, 3, 4 and 5 took 1, 3, 6 and 2 ms
    stamps = [(0, 0.0), (1, 0.001), (3, 0.004), (4, 0.010), (5, 0.012)]
    got = bench_step.buckets(stamps, 2)
    assert list(got) == [0, 2, 4]
    assert got[0] == pytest.approx(1.0) and got[2] == pytest.approx(3.0)
    assert got[4] == pytest.approx((6.0 + 2.0) / 2)


def test_timed_source_delegates_and_charges_its_forwards_to_its_name():
    calls = []

    class Source:
        def prefill(self):
            calls.append("prefill")

        def pending(self, y):
            return ("pending", y)

        def commit(self, y):
            calls.append(("commit", y))

        def forward(self, tokens):
            return [t + 1 for t in tokens]

    totals = {"verifier pass": 0.0}
    timed = bench_step.Timed(Source(), "verifier pass", totals)
    timed.prefill()
    timed.commit([1])
    assert timed.pending([2]) == ("pending", [2]) and timed.forward([1, 2]) == [2, 3]
    assert calls == ["prefill", ("commit", [1])] and totals["verifier pass"] > 0


def run(capsys, tiny_models, *extra) -> str:
    bench_step.main(
        [
            "--drafter",
            str(tiny_models["vl_drafter"]),
            "--verifier",
            str(tiny_models["verifier"]),
            "--tokens",
            "12",
            "--bucket",
            "4",
            *extra,
        ]
    )
    return capsys.readouterr().out


@pytest.mark.usefixtures("one_torch_thread")
def test_the_printed_figures_add_up(capsys, tiny_models):
    out = run(capsys, tiny_models)
    head = re.search(
        r"K=2; (\d+) tokens in (\d+) steps \(acceptance ([\d.]+), MAL ([\d.]+)\)", out
    )
    emitted, steps = int(head[1]), int(head[2])
    assert emitted == 12  # stop tokens are off: every run reaches --tokens
    assert 0 <= float(head[3]) <= 1 and float(head[4]) == pytest.approx(
        emitted / steps, abs=0.005
    )
    split = dict(
        (m[1].strip(), (float(m[2]), float(m[3])))
        for m in re.finditer(r"^  (\D+?)\s+([\d.]+) ms  \(\s*([\d.]+)%\)$", out, re.M)
    )
    assert list(split) == PARTS
    total = float(re.search(r"total \(instrumented\)\s+([\d.]+) ms", out)[1])
    assert sum(ms for ms, _ in split.values()) == pytest.approx(total, abs=0.01)
    assert sum(pct for _, pct in split.values()) == pytest.approx(100, abs=0.3)
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+|-)$", out, re.M)
    assert [int(r[0]) for r in rows] == [0, 4, 8, 12]  # a row per bucket of 4 tokens
    assert all(r[2] != "-" for r in rows[:-1])  # the from-scratch loop's column


@pytest.mark.usefixtures("one_torch_thread")
def test_skip_naive_leaves_the_from_scratch_column_empty(capsys, tiny_models):
    out = run(capsys, tiny_models, "--skip-naive", "--K", "3")
    assert "K=3; 12 tokens in" in out
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+|-)$", out, re.M)
    assert rows and all(r[2] == "-" for r in rows)


@pytest.mark.parametrize("args", [["--bucket", "0"], ["--tokens", "-3"], ["--K", "x"]])
def test_bad_counts_are_argument_errors(capsys, monkeypatch, args):
    def refused_first(*a, **k):
        raise AssertionError(f"{args} accepted: the models were being written")

    monkeypatch.setattr(bench_step, "write_tiny_models", refused_first)
    with pytest.raises(SystemExit) as e:
        bench_step.main(args)
    assert e.value.code == 2 and args[0] in capsys.readouterr().err
