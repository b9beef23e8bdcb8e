"""evals/benchmarks/bench_vllm.py's arguments: an unknown --methods entry is an argparse error before any model is
written or loaded (the runs themselves: tests/backends/vllm/test_asymspec.py)."""

import sys

import pytest
from asymspec_vl.evals.benchmarks import bench_vllm


def test_an_unknown_method_is_an_argparse_error_before_any_model_loads(
    monkeypatch, capsys
):
    monkeypatch.setattr(bench_vllm, "load_models", pytest.fail)
    monkeypatch.setattr(
        sys, "argv", ["bench_vllm", "--models", "tiny", "--methods", "sd,flor"]
    )
    with pytest.raises(SystemExit) as exit_:
        bench_vllm.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--methods" in err and "'flor'" in err
    assert "asymspec, sd, scd, floor, drafter" in err
