"""evals/benchmarks/bench_sampler_memory.py at a small shape: a row per family, rule, greedy / sampled and logprobs,
the chunked peak below the one-call peak where a group spans several chunks, and bad arguments refused. Memory is
counted from the torch profiler's events; nothing is timed."""

import pytest
import torch
from asymspec_vl.evals.benchmarks import bench_sampler_memory as bsm


def test_peak_bytes_counts_what_a_call_holds_at_once():
    def two_at_once():
        a = torch.empty(1000, dtype=torch.float32)
        b = torch.empty(500, dtype=torch.float32)
        del a, b
        return torch.empty(10, dtype=torch.float32)

    assert bsm.peak_bytes(two_at_once) == 6000


def test_the_table_has_a_row_per_rule_and_chunks_lower_the_peak(capsys):
    bsm.main(
        [
            "--B",
            "6",
            "--K",
            "2",
            "--vocab",
            "300",
            "--vocab-v",
            "256",
            "--shared",
            "200",
        ]
        + ["--logprobs", "2", "--budget", str(2 * 3 * 300)]
    )
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| ")]
    cells = [[c.strip() for c in x.strip("|").split("|")] for x in lines]
    assert cells[0] == bsm.COLUMNS
    rows = [dict(zip(bsm.COLUMNS, c)) for c in cells[1:]]
    assert [(r["family"], r["rule"], r["logprobs"]) for r in rows] == [
        (f, f"{m} {s}", k)
        for f in ("same", "cross")
        for m in bsm.METHODS
        for s in ("greedy", "sampled")
        for k in ("-", "2")
    ]
    for r in rows:
        chunked = (
            r["rule"].split()[0] != "floor"
        )  # 2 rows a chunk at K = 2; Floor's 6 fit one
        assert r["rows per chunk"] == ("2" if chunked else "6")
        if chunked and r["rule"] != "sd greedy":
            assert float(r["after blocks"]) < 0.7 * float(r["before blocks"]), r


def test_bad_arguments_are_refused():
    for argv in (["--families", "same,other"], ["--shared", "999", "--vocab", "300"]):
        with pytest.raises(SystemExit):
            bsm.main(argv)
