"""evals/benchmarks/bench_speed.py on the transformers backend at R = 1, two held-out questions, a few tokens: a row
per (R, batch, variant) with the Floor and the drafter alone always measured, the Floor's speedup 1, c_v and c_d
shared by a configuration's rows, each speculative row's bound the cost model's for its measured tokens per
iteration and of_bound their ratio; the table, settings and versions written beside the plot; bad ratios, backends
and variants refused as argument errors. Never timed: no figure is compared with a speed."""

import json
import re

import pytest
from asymspec_vl.evals.benchmarks import bench_speed
from asymspec_vl.evals.benchmarks.speed_measure import VARIANTS, bound


@pytest.mark.usefixtures("one_torch_thread")
def test_one_configurations_rows_follow_the_cost_model(tmp_path, capsys):
    bench_speed.main(
        [
            "--backends",
            "hf",
            "--ratios",
            "1",
            "--batches",
            "1,2",
            "--variants",
            "asymspec-K2",
            "--questions",
            "2",
            "--tokens",
            "6",
            "--repeats",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} == {
        f"bench_speed.{x}" for x in ("md", "csv", "json", "png")
    }
    report = json.loads((tmp_path / "bench_speed.json").read_text())
    assert report["columns"] == bench_speed.COLUMNS
    assert report["settings"]["variants"] == ["asymspec-K2"]
    assert {"python", "torch", "transformers"} <= set(report["versions"])
    rows = report["rows"]
    assert [(r["backend"], r["R"], r["batch"], r["variant"]) for r in rows] == [
        ("hf", 1.0, b, v) for b in (1, 2) for v in ("floor", "drafter", "asymspec-K2")
    ]
    # a progress line and a line of the printed table per row
    assert len(re.findall(r"^hf R=1 batch \d \S+: [\d.]+ tok/s", out, re.M)) == len(
        rows
    )
    assert len(re.findall(r"^\| hf \| 1\.00 \| \d \|", out, re.M)) == len(rows)
    for batch in (1, 2):
        floor, drafter, spec = (r for r in rows if r["batch"] == batch)
        assert floor["speedup"] == 1.0 and "bound" not in floor | drafter
        assert spec["speedup"] == pytest.approx(
            spec["tokens_per_s"] / floor["tokens_per_s"]
        )
        assert len({(r["c_v_ms"], r["c_d_ms"]) for r in (floor, drafter, spec)}) == 1
        assert floor["c_v_ms"] == pytest.approx(1e3 * floor["seconds_per_iteration"])
        assert drafter["c_d_ms"] == pytest.approx(
            1e3 * drafter["seconds_per_iteration"]
        )
        gain = spec["tokens_per_iteration"] / floor["tokens_per_iteration"]
        assert spec["bound"] == pytest.approx(
            bound(
                gain,
                spec["c_d_ms"],
                spec["c_v_ms"],
                VARIANTS["asymspec-K2"].drafter_forwards,
            )
        )
        assert spec["of_bound"] == pytest.approx(spec["speedup"] / spec["bound"])
        assert 1.0 <= spec["mean_accepted_length"] <= 3.0  # K = 2: 1 to K + 1 a step
        # decoding after the first step: no iteration emits more than K + 1 tokens a row (the 1-token run's
        # first step generated up to K + 1 tokens; counting them as decoded gave more)
        assert 0 < spec["tokens_per_iteration"] <= batch * 3
        assert floor["tokens_per_iteration"] <= batch
        # c_v(K + 1) >= c_v less timing noise; the bound with it is the bound with that step cost
        assert spec["c_v_wide_ms"] > 0.5 * spec["c_v_ms"]
        assert spec["bound_wide"] == pytest.approx(
            bound(
                gain,
                spec["c_d_ms"],
                spec["c_v_ms"],
                VARIANTS["asymspec-K2"].drafter_forwards,
                spec["c_v_wide_ms"],
            )
        )
        assert spec["of_bound_wide"] == pytest.approx(
            spec["speedup"] / spec["bound_wide"]
        )


@pytest.mark.parametrize(
    "args",
    [
        ["--ratios", "0.5"],
        ["--ratios", "1,x"],
        ["--backends", "tpu"],
        ["--variants", "floor"],
        ["--batches", "0"],
    ],
)
def test_bad_arguments_are_argument_errors(capsys, args):
    with pytest.raises(SystemExit) as e:
        bench_speed.parse_args(args)
    assert e.value.code == 2 and args[0] in capsys.readouterr().err
