"""core/kernels/compile_check.py: its variants name every parameter of the kernel they compile (signature and
constexprs, in the kernel's order) and cover every dtype, delta source, gate, bonus rule and layout flag the
launches use; compile_all refuses to run under triton's interpreter, compiles each variant to a cubin (in a process
without the interpreter: `python -m asymspec_vl.doctor.kernels compile` prints their count) and raises on a variant
the compiler rejects instead of counting it."""

import os
import subprocess
import sys

import pytest

from asymspec_vl.core.kernels import compile_check, triton_gate

KERNELS = ("_stats_kernel", "_divergence_kernel", "_decide_kernel")


def by_kernel() -> dict[str, list[dict]]:
    out = {k: [] for k in KERNELS}
    for name, sig, constexprs in compile_check.variants():
        assert triton_gate.__dict__[name].arg_names == [*sig, *constexprs], name
        out[name].append({**sig, **constexprs})
    return out


def values(rows: list[dict], key: str) -> set:
    return {r[key] for r in rows}


def test_every_variant_names_its_kernels_parameters_and_every_launch_flag_is_covered():
    v = by_kernel()
    pointers = set(compile_check.PTR.values())
    assert values(v["_stats_kernel"], "a_ptr") == pointers
    assert values(v["_divergence_kernel"], "a_ptr") == pointers
    assert values(v["_stats_kernel"], "DELTA") == set(triton_gate.DELTA_IDS.values())
    for flag in ("BETA_ZERO", "HAS_BANNED", "T_ARGMAX"):
        assert values(v["_stats_kernel"], flag) == {False, True}, flag
    assert values(v["_divergence_kernel"], "KL") == {False, True}
    assert values(v["_decide_kernel"], "GATE") == set(triton_gate.GATE_IDS.values())
    for flag in ("HAS_N", "BONUS_FUSED", "HAS_DIV"):
        assert values(v["_decide_kernel"], flag) == {False, True}, flag


def test_compiling_under_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="unset TRITON_INTERPRET"):
        compile_check.compile_all()


COMPILE = """
from asymspec_vl.core.kernels import compile_check
from asymspec_vl.doctor import kernels
print("variants", len(list(compile_check.variants())))
assert kernels.main(["compile", "--arch", "90"]) == 0
real = compile_check.variants
def with_a_bad_one():  # tl.arange over 3000 lanes: the compiler wants a power of two
    name, sig, constexprs = next(real())
    yield name, sig, {**constexprs, "BLOCK": 3000}
compile_check.variants = with_a_bad_one
try:
    print("compiled", compile_check.compile_all(90))
except Exception as e:
    print("refused", type(e).__name__)
"""


def test_each_variant_compiles_to_a_cubin_and_a_rejected_one_raises():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    n = int(lines[0].split()[1])
    assert n == sum(len(x) for x in by_kernel().values()) and n > 10
    assert lines[1] == f"compiled {n} kernel variants for sm_90"
    assert lines[2].startswith("refused "), lines
