"""evals/benchmarks/bench_vocab_map.py at one small shape: a random map of the asked sizes (verifier ids increasing,
no id twice), a row per pair and shape whose overhead is the mapped step minus the one-vocabulary step, the toy
pair's row named with its map's real sizes, and bad --shapes / --repeat refused as argument errors. Never timed."""

import re

import pytest
import torch
from asymspec_vl.evals.benchmarks import bench_vocab_map as bvm


def test_a_random_map_has_the_asked_sizes_and_pairs_distinct_ids():
    vmap = bvm.random_map(50, 40, 10, seed=3)
    assert (vmap.drafter_size, vmap.verifier_size, vmap.size) == (50, 40, 10)
    v, d = vmap.verifier_ids, vmap.drafter_ids
    assert (v[1:] > v[:-1]).all() and v.max() < 40 and v.min() >= 0
    assert d.unique().numel() == 10 and d.max() < 50 and d.min() >= 0
    again = bvm.random_map(50, 40, 10, seed=3)
    assert torch.equal(again.drafter_ids, d) and torch.equal(again.verifier_ids, v)


def test_a_row_names_its_shape_and_its_overhead_is_the_difference_of_the_steps():
    row = bvm.bench("small", bvm.random_map(300, 200, 120), B=2, K=3, repeat=1)
    assert list(row) == bvm.COLUMNS and row["B"] == 2 and row["K"] == 3
    assert row["map overhead ms"] == pytest.approx(
        row["mapped step ms"] - row["one-vocabulary step ms"], abs=0.0015
    )


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_table_has_a_row_per_pair_and_shape_that_adds_up(capsys):
    bvm.main(["--shapes", "1x2,2x1", "--repeat", "1"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    assert cells(lines[0]) == bvm.COLUMNS
    rows = [dict(zip(bvm.COLUMNS, cells(line))) for line in lines[1:]]
    toy = bvm.toy_map()
    assert [(r["pair"].split(" (")[0], r["B"], r["K"]) for r in rows] == [
        (name, B, K)
        for name in ("Qwen3 151,936 -> Llama-3 128,256", "toy embedded-llama")
        for B, K in (("1", "2"), ("2", "1"))
    ]
    assert rows[2]["pair"] == (
        f"toy embedded-llama ({toy.drafter_size} -> {toy.verifier_size}, {toy.size} shared)"
    )
    assert 0 < toy.size <= min(toy.drafter_size, toy.verifier_size)
    for r in (
        rows
    ):  # printed to 2 decimals (1 from 10 ms up): each is off by half a unit at most
        texts = [
            r[c]
            for c in ("mapped step ms", "one-vocabulary step ms", "map overhead ms")
        ]
        mapped, one, overhead = (float(t) for t in texts)
        slack = sum(0.5 * 10 ** -len(t.split(".")[1]) for t in texts) + 1e-3
        assert overhead == pytest.approx(mapped - one, abs=slack)
    assert "median of 1" in out
    assert re.search(
        r"building the map once \(151,936 x 128,256, 109,566 shared\): [\d.]+ s", out
    )


@pytest.mark.parametrize(
    "args",
    [["--shapes", "1x"], ["--shapes", "0x2"], ["--shapes", "2"], ["--repeat", "0"]],
)
def test_bad_arguments_are_argument_errors(capsys, args):
    with pytest.raises(SystemExit) as e:
        bvm.main(args)
    assert e.value.code == 2 and args[0] in capsys.readouterr().err
