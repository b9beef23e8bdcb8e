"""toy/cli.py through `asymspec-vl toy ...` (cli.main, in process): each subcommand's arguments reach the job that
does the work (train_pair, train_family_verifier, write_heavy_verifier: replaced here by recorders), bad settings
are one typed error line (rc 2) before any work, and `toy example` writes the held-out scenes it prints."""

import dataclasses
import json
import shlex

import pytest
from asymspec_vl.evals.toy.eval import quick_heldout
from PIL import Image

import asymspec_vl.toy.cli as toy_cli
import asymspec_vl.toy.train as toy_train
from asymspec_vl.cli import main
from asymspec_vl.toy import PAIR_DIR, world
from asymspec_vl.toy.train import LLAMA_RECIPE, ToyTrainConfig


class Recorder:
    """A stand-in job: records its call, returns `result`."""

    def __init__(self, result):
        self.result, self.calls = result, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def test_toy_train_runs_train_pair_with_the_scaled_recipe(
    monkeypatch, tmp_path, capsys
):
    job = Recorder({"final_loss": 0.5, "heldout": {"asymspec": 1.0}, "other": 1})
    monkeypatch.setattr(toy_train, "train_pair", job)
    out = str(tmp_path / "pair")
    argv = [
        "toy",
        "train",
        out,
        "--seed",
        "3",
        "--workers",
        "1",
        "--scale",
        "0.5",
        "--eval-n",
        "7",
    ]
    assert main(argv) == 0
    [(args, kwargs)] = job.calls
    assert args == (out, ToyTrainConfig(seed=3, eval_n=7).scaled(0.5))
    assert kwargs == {"workers": 1, "heldout": quick_heldout}
    printed = capsys.readouterr().out
    assert json.loads(printed[: printed.index("\nmodels:") + 1]) == {
        "final_loss": 0.5,
        "heldout": {"asymspec": 1.0},
    }  # the manifest's figures, nothing else
    assert (
        f"models: {out}/drafter {out}/verifier\nmanifest: {out}/manifest.json"
        in printed
    )


def test_toy_train_defaults(monkeypatch, tmp_path):
    job = Recorder({})
    monkeypatch.setattr(toy_train, "train_pair", job)
    assert main(["toy", "train", str(tmp_path)]) == 0
    [(args, kwargs)] = job.calls
    assert args[1] == ToyTrainConfig(seed=0, eval_n=150).scaled(1.0) == ToyTrainConfig()
    assert kwargs["workers"] == 2


@pytest.mark.parametrize("own_drafter", [False, True])
def test_toy_train_llama_trains_the_family_verifier_for_the_right_drafter(
    monkeypatch, tmp_path, capsys, own_drafter
):
    job = Recorder({"vocab_map": {"shared": 5}, "final_loss": 1.0, "stray": 0})
    monkeypatch.setattr(toy_train, "train_family_verifier", job)
    monkeypatch.setattr(toy_train, "train_pair", Recorder(None))  # must not run
    if own_drafter:
        (tmp_path / "drafter").mkdir()
        (tmp_path / "drafter" / "config.json").write_text("{}")
    argv = [
        "toy",
        "train",
        str(tmp_path),
        "--verifier-family",
        "llama",
        "--seed",
        "2",
        "--scale",
        "0.25",
    ]
    assert main(argv) == 0
    [(args, kwargs)] = job.calls
    drafter = tmp_path / "drafter" if own_drafter else PAIR_DIR / "drafter"
    cfg = dataclasses.replace(
        ToyTrainConfig(seed=2, eval_n=150), **LLAMA_RECIPE
    ).scaled(0.25)
    assert args == (str(tmp_path), cfg, "llama", drafter)
    assert kwargs == {"heldout": quick_heldout}
    assert toy_train.train_pair.calls == []
    printed = capsys.readouterr().out
    assert '"stray"' not in printed and '"shared": 5' in printed
    assert (
        f"models: {drafter} {tmp_path}/verifier-llama\nmanifest: {tmp_path}/llama_manifest.json"
        in printed
    )


@pytest.mark.parametrize(
    "option", [["--scale", "0"], ["--scale", "-1"], ["--eval-n", "-1"]]
)
def test_toy_train_refuses_bad_numbers_before_any_work(
    monkeypatch, tmp_path, capsys, option
):
    job = Recorder({})
    monkeypatch.setattr(toy_train, "train_pair", job)
    assert main(["toy", "train", str(tmp_path), *option]) == 2
    assert (
        capsys.readouterr().err
        == "asymspec-vl: error: --scale must be > 0 and --eval-n >= 0\n"
    )
    assert job.calls == []


@pytest.mark.parametrize(
    "argv, words",
    [
        (["toy", "train", "out", "--workers", "3"], "--workers: invalid choice: 3"),
        (
            ["toy", "train", "out", "--verifier-family", "gemma"],
            "--verifier-family: invalid choice",
        ),
        (["toy", "heavy", "out"], "the following arguments are required: --cost-ratio"),
        (["toy"], "the following arguments are required: TOY"),
    ],
)
def test_bad_arguments_are_usage_errors(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_toy_heavy_writes_the_heavy_verifier_and_prints_the_eval_command(
    monkeypatch, tmp_path, capsys
):
    job = Recorder(None)

    def write(out_dir, ratio, verifier):
        job(out_dir, ratio, verifier)
        return out_dir

    monkeypatch.setattr(toy_cli, "write_heavy_verifier", write)
    out = tmp_path / "heavy"
    assert main(["toy", "heavy", str(out), "--cost-ratio", "2.5"]) == 0
    assert job.calls == [((out, "2.5", None), {})]
    assert out.is_dir()  # writable_folder made it before the write
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0] == f"heavy verifier (10 decoder layers, cost ratio 2.5): {out}"
    )  # 4 layers x 2.5
    command = shlex.split(lines[-1])
    i = command.index("eval")
    assert command[i:] == [
        "eval",
        "toy",
        "--drafter",
        "embedded",
        "--verifier",
        str(out),
        "--batch",
        "1",
        "--variants",
        "floor,asymspec-K2-b1,asymspec-K4-b1",
        "--out",
        f"{out}-eval",
    ]


@pytest.mark.parametrize("ratio", ["0.3", "0", "65", "two"])
def test_toy_heavy_refuses_a_bad_ratio_before_writing(
    monkeypatch, tmp_path, capsys, ratio
):
    job = Recorder(None)
    monkeypatch.setattr(toy_cli, "write_heavy_verifier", job)
    out = tmp_path / "heavy"
    assert main(["toy", "heavy", str(out), "--cost-ratio", ratio]) == 2
    assert capsys.readouterr().err.startswith("asymspec-vl: error: ")
    assert job.calls == [] and not out.exists()


def test_toy_example_writes_the_heldout_scenes_and_their_commands(tmp_path, capsys):
    out = tmp_path / "examples"
    assert main(["toy", "example", str(out), "--n", "2"]) == 0
    scenes = world.heldout(2)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{ex.uid}.{ext}" for ex in scenes for ext in ("png", "json")
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    for ex, (expected, command) in zip(scenes, zip(lines[::2], lines[1::2])):
        record = json.loads((out / f"{ex.uid}.json").read_text())
        assert record == {
            "image": f"{ex.uid}.png",
            "qtype": ex.qtype,
            "caption": ex.caption,
            "question": ex.question,
            "answer": ex.answer,
        }
        assert expected == f"# expected answer: {ex.answer}"
        args = shlex.split(command)
        assert args[args.index("--image") + 1] == str(out / f"{ex.uid}.png")
        assert args[args.index("--question") + 1] == ex.question
        assert args[args.index("--caption") + 1] == ex.caption
        with Image.open(out / f"{ex.uid}.png") as img:
            assert img.size == ex.image().size
