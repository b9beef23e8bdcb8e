"""evals/benchmarks/bench_toy_train.py at a micro scale (one training step per model, three held-out questions):
the retrained weights are reported as differing from the shipped ones (and as bit-identical when they are the
shipped ones), the side-by-side table has a row per method and a reproduced/shipped cell per column, its largest
difference is the largest of its cells', and a held-out set that leaves a question type's column empty is refused.
"""

import json
import re
import shutil

import pytest
from asymspec_vl.evals.benchmarks import bench_toy_train

import asymspec_vl.toy.train as train
from asymspec_vl.toy import PAIR_DIR, world

CELL = r"\s*([\d.]+)/([\d.]+)\s*"


def table(out: str) -> dict[str, list[tuple[float, float]]]:
    rows = {}
    for key in bench_toy_train.KEYS:
        line = re.search(rf"^{re.escape(key)} +((?:{CELL}){{4}})$", out, re.M)
        assert line, f"no row for {key}:\n{out}"
        rows[key] = [(float(a), float(b)) for a, b in re.findall(CELL, line[1])]
    return rows


def check_table(out: str) -> dict:
    rows = table(out)
    assert len(rows) == len(bench_toy_train.KEYS)
    for cells in rows.values():
        assert len(cells) == len(world.QTYPES) + 1
        for side in (0, 1):  # three questions, one of each type: Overall is their mean
            types = [c[side] for c in cells[:-1]]
            assert cells[-1][side] == pytest.approx(sum(types) / 3, abs=0.06)
    worst = max(abs(a - b) for cells in rows.values() for a, b in cells)
    printed = float(re.search(r"largest difference: ([\d.]+) points", out)[1])
    assert printed == pytest.approx(worst, abs=0.11)  # cells are printed to 0.1
    return rows


@pytest.mark.usefixtures("one_torch_thread")
def test_a_micro_retraining_differs_from_the_shipped_pair_and_the_table_adds_up(
    capsys, tmp_path
):
    assert (
        bench_toy_train.main(
            ["--scale", "0.0001", "--n", "3", "--workers", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    out = capsys.readouterr().out
    for name in ("drafter", "verifier"):
        assert f"{name}/model.safetensors: differs from the shipped one" in out
    assert (tmp_path / "manifest.json").is_file()
    rows = check_table(out)
    # one step of training answers nothing right; the shipped pair answers some
    assert any(b > a for cells in rows.values() for a, b in cells)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_shipped_weights_are_reported_bit_identical_with_no_difference(
    capsys, tmp_path, monkeypatch
):
    def shipped_copy(out, cfg, workers):
        for name in ("drafter", "verifier"):
            shutil.copytree(PAIR_DIR / name, out / name)
        return json.loads((PAIR_DIR / "manifest.json").read_text())

    monkeypatch.setattr(train, "train_pair", shipped_copy)
    bench_toy_train.main(["--n", "3", "--workers", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    for name in ("drafter", "verifier"):
        assert f"{name}/model.safetensors: bit-identical to the shipped one" in out
    rows = check_table(out)
    assert all(a == b for cells in rows.values() for a, b in cells)
    assert "largest difference: 0.0 points" in out


@pytest.mark.parametrize("n", ["0", "2", "x"])
def test_a_held_out_set_without_every_question_type_is_refused(capsys, monkeypatch, n):
    def refused_first(*args, **kwargs):
        raise AssertionError(f"--n {n} accepted: training started")

    monkeypatch.setattr(train, "train_pair", refused_first)
    with pytest.raises(SystemExit) as e:
        bench_toy_train.main(["--n", n])
    assert e.value.code == 2 and "--n" in capsys.readouterr().err
