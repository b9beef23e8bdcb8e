"""Speed as a newcomer reads it from `asymspec-vl generate`: every method warmed up before it is timed, one torch
thread on the CPU (--threads), tokens/s beside "× Floor", and a note when the pair's costs leave speculation
nothing to gain (the embedded pair); -K's error names the flag."""

import json
from pathlib import Path

import pytest
import torch

from asymspec_vl import AsymSpecVL
from asymspec_vl.cli import main
from asymspec_vl.timing import speedup_bound

EXAMPLES = Path(__file__).resolve().parents[1] / "demo" / "examples"
TOY = next(
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"] == "toy-read.png"
)
ARGV = [
    "generate",
    "--image",
    str(EXAMPLES / TOY["image"]),
    "--question",
    TOY["question"],
    "--caption",
    TOY["caption"],
]


@pytest.fixture
def threads_kept():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_generate_shows_times_floor_and_the_embedded_pair_s_note(capsys, threads_kept):
    assert main([*ARGV, "--methods", "asymspec,floor", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    heads = [line for line in out.splitlines() if line.startswith("== ")]
    assert heads[0].startswith("== asymspec:") and "× Floor)" in heads[0]
    assert heads[1].startswith("== floor:") and "×" not in heads[1]
    assert "note: the drafter has" in err and "toy heavy" in err


def test_every_method_is_warmed_up_before_it_is_timed(
    monkeypatch, capsys, threads_kept
):
    calls, real = [], AsymSpecVL.generate

    def recording(self, *args, method="asymspec", **kwargs):
        res = real(self, *args, method=method, **kwargs)
        calls.append((method, kwargs.get("max_new_tokens"), res.stats.tokens_per_s))
        return res

    monkeypatch.setattr(AsymSpecVL, "generate", recording)
    assert main([*ARGV, "--methods", "drafter,asymspec", "--device", "cpu"]) == 0
    warm = [(m, n) for m, n, _ in calls[:3]]
    assert warm == [
        ("drafter", 2),
        ("asymspec", 2),
        ("floor", 2),
    ]  # the Floor is timed for × Floor
    assert [(m, n) for m, n, _ in calls[3:]] == [
        ("drafter", None),
        ("asymspec", None),
        ("floor", None),
    ]


def test_one_torch_thread_by_default_and_threads_sets_it(
    capsys, monkeypatch, threads_kept
):
    # the calls are recorded, not read back: an in-process vLLM CPU engine earlier in this process replaces
    # torch.set_num_threads by a no-op once it has bound its threads
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    assert (
        main([*ARGV, "--methods", "floor", "--device", "cpu", "--max-new-tokens", "2"])
        == 0
    )
    assert calls == [1]
    assert (
        main(
            [
                *ARGV,
                "--methods",
                "floor",
                "--device",
                "cpu",
                "--max-new-tokens",
                "2",
                "--threads",
                "3",
            ]
        )
        == 0
    )
    assert calls == [1, 3]
    assert (
        main(
            [
                *ARGV,
                "--methods",
                "floor",
                "--device",
                "cpu",
                "--max-new-tokens",
                "2",
                "--threads",
                "0",
            ]
        )
        == 0
    )
    assert calls == [1, 3]  # 0: torch's own choice, untouched


def test_k_s_error_names_the_flag(capsys):
    assert main([*ARGV, "-K", "0"]) == 2
    err = capsys.readouterr().err
    assert "-K 0 is invalid" in err and "AsymSpecConfig" not in err


def test_the_bound_separates_the_embedded_pair_from_the_real_one():
    assert (
        speedup_bound("asymspec", 2, 1.0) < 1.0 < speedup_bound("asymspec", 2, 2 / 32)
    )
    assert (
        speedup_bound("floor", 2, 1.0) is None
        and speedup_bound("drafter", 2, 1.0) is None
    )


def test_library_chatter_leaves_stdout_to_the_report():
    """What doctor and bench_vllm wrap their engines in: C++ writes to fd 1 and Python prints go to stderr."""
    import subprocess
    import sys

    code = (
        "import os; from asymspec_vl.quiet import stdout_to_stderr\n"
        "print('before')\n"
        "with stdout_to_stderr():\n"
        "    os.write(1, b'[Gloo] Rank 0 is connected\\n'); print('INFO vllm engine started')\n"
        "print('| table |')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout == "before\n| table |\n"
    assert "[Gloo]" in out.stderr and "INFO vllm" in out.stderr
