"""doctor/kernels.py, the kernel checks' command line, at V = 64: self-check reports every case equal for the real
kernel (exit 0; one gate's cases, for time), and every case as differing, by name, for a kernel that emits
the wrong token (exit 1, in its text and its JSON forms); compile refuses to run under triton's interpreter
(compile itself, without the interpreter: tests/core/kernels/test_compile_check.py). Without a GPU the kernel
runs in triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported)."""

import json
import re

import pytest

import asymspec_vl.core.kernels.self_check as self_check_module
from asymspec_vl.core.config import BONUS_RULES, DELTA_SOURCES, GATES
from asymspec_vl.core.kernels import triton_gate
from asymspec_vl.doctor import kernels

PER_GATE = len(DELTA_SOURCES) * len(BONUS_RULES)
ARGS = ["self-check", "--vocab", "64", "--dtype", "float32"]


def test_the_real_kernel_passes_every_case(capsys, monkeypatch):
    monkeypatch.setattr(self_check_module, "GATES", GATES[:1])  # one gate: time
    assert kernels.main(ARGS) == 0
    out = capsys.readouterr().out
    cases = PER_GATE
    assert re.fullmatch(
        rf"{cases}/{cases} cases equal on \w+ \(float32, V=64, reference float32\)\n",
        out,
    ), out


def test_the_reference_runs_in_float64_on_the_kernels_bf16_inputs(capsys, monkeypatch):
    """doctor --quick's gate row: --reference float64 computes the torch reference in double precision."""
    import torch

    from asymspec_vl.core import gate

    real, seen = gate.asymspec_step, []
    monkeypatch.setattr(
        gate,
        "asymspec_step",
        lambda a, *r, **k: seen.append(a.dtype) or real(a, *r, **k),
    )
    monkeypatch.setattr(self_check_module, "GATES", GATES[:1])  # one gate: time
    args = [
        "self-check",
        "--vocab",
        "64",
        "--dtype",
        "bfloat16",
        "--reference",
        "float64",
    ]
    assert kernels.main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["reference"] == "float64" and result["mismatches"] == []
    assert seen and set(seen) == {torch.float64}


def test_a_kernel_emitting_the_wrong_token_fails_every_case_by_name(
    capsys, monkeypatch
):
    real = triton_gate.run_gate

    def off_by_one(*args, **kwargs):
        out = real(*args, **kwargs)
        out[2].add_(1)  # the emitted token
        return out

    monkeypatch.setattr(triton_gate, "run_gate", off_by_one)
    monkeypatch.setattr(self_check_module, "GATES", GATES[-1:])  # one gate: time
    assert kernels.main([*ARGS, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["cases"] == PER_GATE and result["vocab"] == 64
    assert len(result["mismatches"]) == PER_GATE
    assert all(m.startswith(f"gate={GATES[-1]} ") for m in result["mismatches"])


def test_the_text_form_counts_and_names_the_differing_cases(capsys, monkeypatch):
    found = {
        "device": "cpu",
        "cases": 5,
        "reference": "float32",
        "mismatches": ["gate=cda delta=raw bonus=fused", "gate=kl delta=scd bonus=t"],
    }
    monkeypatch.setattr(
        self_check_module, "self_check", lambda dtype, vocab, reference: found
    )
    assert kernels.main(ARGS) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "3/5 cases equal on cpu (float32, V=64, reference float32)",
        "  differs: gate=cda delta=raw bonus=fused",
        "  differs: gate=kl delta=scd bonus=t",
    ]


def test_compile_under_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="unset TRITON_INTERPRET"):
        kernels.main(["compile"])


@pytest.mark.parametrize(
    "args", [["self-check", "--dtype", "int8"], ["compile", "--arch", "x"], []]
)
def test_bad_arguments_are_argument_errors(args):
    with pytest.raises(SystemExit) as e:
        kernels.main(args)
    assert e.value.code == 2
