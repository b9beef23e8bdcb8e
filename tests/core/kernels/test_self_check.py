"""core/kernels/self_check.py (the doctor's kernel check), run as the doctor runs it on a CPU (triton's interpreter,
in a process of its own with TRITON_INTERPRET=1): every gate x delta source x bonus case agrees with the torch
reference, a reference that disagrees is reported by case name, and without the interpreter the check refuses to
run rather than failing obscurely. random_step's verifier clearly accepts or rejects each draft."""

import json
import os
import subprocess
import sys

import pytest
import torch

from asymspec_vl.core.config import BONUS_RULES, DELTA_SOURCES, GATES
from asymspec_vl.core.kernels.self_check import random_step, self_check

RUN = """
import json, sys
from asymspec_vl.core import gate
from asymspec_vl.core.kernels.self_check import self_check
if sys.argv[1] == "off-by-one":  # a reference that emits the next token id: every case must mismatch
    real = gate.asymspec_step
    def shifted(*a, **k):
        out = real(*a, **k)
        out.token.add_(1)
        return out
    gate.asymspec_step = shifted
print(json.dumps(self_check(device="cpu", dtype="float32", vocab=64, batch=2, K=2)))
"""


def run(mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", RUN, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_kernel_agrees_with_the_reference_on_every_case_and_a_disagreement_is_named():
    cases = len(GATES) * len(DELTA_SOURCES) * len(BONUS_RULES)
    good = run("as-is")
    assert (
        good["cases"] == cases and good["mismatches"] == [] and good["device"] == "cpu"
    )
    bad = run("off-by-one")
    assert len(bad["mismatches"]) == cases and bad["mismatches"][0].startswith(
        f"gate={GATES[0]} "
    )


def test_without_the_interpreter_the_check_refuses_to_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        self_check(device="cpu")


def test_random_steps_leave_no_decision_to_rounding():
    a, b, t, drafts, n, banned = random_step(3, 4, 3, 50, torch.float32, "cpu")
    assert (
        a.shape == b.shape == t.shape == (4, 4, 50)
        and drafts.shape == (4, 3)
        and banned.shape == (50,)
    )
    at_drafts = t[:, :3].gather(-1, drafts[..., None]).squeeze(-1)
    assert (
        set(at_drafts.abs().unique().tolist()) == {25.0} and ((n >= 0) & (n <= 3)).all()
    )
