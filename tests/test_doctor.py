"""`asymspec-vl doctor` on this machine (the CPU build in CI): every check runs and passes, and the command's exit
status says so."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.vllm


@pytest.mark.timeout(1800)  # its subprocess may take up to 1500 s
def test_doctor_passes_on_the_cpu_build(tmp_path):
    out = tmp_path / "doctor.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TRITON_INTERPRET", None)  # the doctor sets it for its kernel check itself
    run = subprocess.run([sys.executable, "-m", "asymspec_vl.cli", "doctor", "--json", str(out)], env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads(out.read_text())
    versions = dict(map(tuple, report["environment"]))
    assert versions["vllm"].startswith("0.19") and "torch" in versions
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("asymspec K=2", "asymspec K=4 (same engine)", "scd K=2", "sd K=2", "floor", "drafter alone",
                 "drafter x_full logits", "forced preemption", "gate kernel == torch reference",
                 "attention backend vLLM selected"):
        assert checks[name]["ok"], (name, checks[name])
    assert checks["attention backend vLLM selected"]["detail"] == "CPU_ATTN"
    assert "6/6 requests equal" in checks["asymspec K=2"]["detail"]
    assert "| check | backend | result | detail |" in run.stdout and "checks passed" in run.stdout
