"""What a newcomer meets on the command line beyond `generate`: `toy example` prints commands that run as printed,
an eval rerun with nothing left says so, eval progress bars say what they count."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "asymspec-vl"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def test_toy_example_prints_commands_that_run_as_printed(tmp_path):
    out = subprocess.run(
        [str(SCRIPT), "toy", "example", "scenes", "--n", "1"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    command = [line for line in out.stdout.splitlines() if not line.startswith("#")][0]
    assert not command.startswith(
        "asymspec-vl "
    )  # not on PATH in a fresh checkout: the script's own path
    run = subprocess.run(
        shlex.split(command) + ["--max-new-tokens", "4"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "== asymspec:" in run.stdout and "== drafter:" in run.stdout


def test_an_eval_rerun_with_nothing_left_says_so(tmp_path):
    argv = [
        str(SCRIPT),
        "eval",
        "toy",
        "--n",
        "2",
        "--variants",
        "floor",
        "--out",
        str(tmp_path / "run"),
    ]
    first = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    assert first.returncode == 0, first.stderr
    assert (
        "resumed" not in first.stderr
        and "toy: 2 questions × 1 variants" in first.stderr
    )  # the bar's label
    again = subprocess.run(
        argv + ["--no-progress"], capture_output=True, text=True, env=ENV, timeout=300
    )
    assert (
        again.returncode == 0
        and "resumed: nothing to do (all 2 results are in" in again.stderr
    )
    assert again.stdout == first.stdout  # the same table
    assert (
        "tokens/s: one pass" in first.stdout
        and "compare methods within one table" in first.stdout
    )


def test_generate_on_vllm_prints_only_its_json_to_stdout():
    """vLLM's start-up log (its logger, the engine process's prints) goes to stderr: stdout is one JSON document."""
    image = ROOT / "demo" / "examples" / "toy-mult.png"
    out = subprocess.run(
        [
            str(SCRIPT),
            "generate",
            "--backend",
            "vllm",
            "--json",
            "--image",
            str(image),
            "--question",
            "What is 3 times 4?",
            "--max-new-tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        json.loads(out.stdout)["method"] == "asymspec"
    )  # the whole stdout parses: nothing else is in it
    assert "INFO" in out.stderr  # vLLM did log, on stderr


@pytest.mark.parametrize(
    "image, question, words",
    [
        ("missing.png", "What is 3 times 4?", "image file not found"),
        (str(ROOT / "demo" / "examples" / "toy-mult.png"), "   ", "question is empty"),
    ],
)
def test_generate_checks_every_input_before_any_model_loads(
    monkeypatch, capsys, tmp_path, image, question, words
):
    """A wrong --image or an empty question is the error at once, not after the models load (minutes with a 32B
    verifier); the note about a missing --caption is not printed before an unrelated error."""
    from asymspec_vl import commands
    from asymspec_vl.cli import main

    def load(args):
        raise AssertionError("a model loaded before the inputs were checked")

    monkeypatch.setattr(commands, "load_from_args", load)
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--image", image, "--question", question]) == 2
    err = capsys.readouterr().err
    assert words in err and "no --caption" not in err
