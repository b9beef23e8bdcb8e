"""core/kernels/interpreter.py: the gate kernels on CPU tensors (triton's interpreter) are refused with
InterpreterNumpyError on a numpy the interpreter breaks with (numpy >= 2.4 under triton < 3.7), before any kernel
runs; other version pairs run."""

import numpy as np
import pytest
import torch
import triton

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import InterpreterNumpyError
from asymspec_vl.core.kernels import asymspec_step
from asymspec_vl.core.kernels.interpreter import check_numpy, release
from asymspec_vl.core.kernels.triton_gate import run_gate

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)  # interpreter
# CPU tensors reach the kernels only through the interpreter (conftest.py sets TRITON_INTERPRET=1 without a GPU)
interpreted = pytest.mark.skipif(
    torch.cuda.is_available(), reason="with a GPU the tests run compiled kernels"
)


def step():
    """a, b, t [1, 3, 8], drafts [1, 2], num_drafts [1]: a small CPU step."""
    g = torch.Generator().manual_seed(0)
    a, b, t = (torch.randn(1, 3, 8, generator=g) for _ in range(3))
    return a, b, t, torch.tensor([[1, 2]]), torch.tensor([2])


def versions(monkeypatch, numpy: str, triton_: str) -> None:
    monkeypatch.setattr(np, "__version__", numpy)
    monkeypatch.setattr(triton, "__version__", triton_)


@pytest.mark.parametrize(
    "numpy, triton_, breaks",
    [
        ("2.2.6", "3.6.0", False),
        ("2.3.5", "3.6.0", False),
        ("2.4.0", "3.6.0", True),
        ("2.5.1", "3.5.1", True),
        ("3.0.0rc1", "3.6.0", True),
        ("2.5.0", "3.7.0", False),
    ],
)
def test_check_numpy_refuses_numpy_2_4_and_later_under_triton_before_3_7(
    monkeypatch, numpy, triton_, breaks
):
    versions(monkeypatch, numpy, triton_)
    if breaks:
        with pytest.raises(InterpreterNumpyError, match=f"numpy {numpy}"):
            check_numpy()
    else:
        check_numpy()


@interpreted
@pytest.mark.parametrize("numpy", ["2.4.0", "2.5.1"])
def test_the_kernels_refuse_a_bad_numpy_before_they_run(monkeypatch, numpy):
    versions(monkeypatch, numpy, "3.6.0")
    a, b, t, drafts, n = step()
    with pytest.raises(
        InterpreterNumpyError, match=rf"numpy {numpy}: install numpy<2\.4"
    ):
        run_gate(a, b, t, drafts, n, AsymSpecConfig(K=2), None, with_divergence=True)
    # the forced triton path on CPU tensors reaches the same check
    monkeypatch.setenv("ASYMSPEC_GATE_BACKEND", "triton")
    with pytest.raises(InterpreterNumpyError, match="triton 3.6.0's CPU interpreter"):
        asymspec_step(a, b, t, drafts, AsymSpecConfig(K=2), num_drafts=n)


@interpreted
@pytest.mark.parametrize("numpy, triton_", [("2.3.5", "3.6.0"), ("2.5.0", "3.7.0")])
def test_the_interpreter_runs_where_numpy_and_triton_agree(monkeypatch, numpy, triton_):
    versions(monkeypatch, numpy, triton_)
    a, b, t, drafts, n = step()
    _, n_acc, token, _ = run_gate(
        a, b, t, drafts, n, AsymSpecConfig(K=2), None, with_divergence=True
    )
    assert n_acc.shape == (1,) and token.shape == (1,)


def test_release_reads_major_and_minor():
    assert release("2.4.0rc1") == (2, 4) and release("3.10.2") == (3, 10)
    with pytest.raises(ValueError):
        release("dev")
