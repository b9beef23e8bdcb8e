"""Triton's CPU interpreter (TRITON_INTERPRET=1: the gate kernels on CPU tensors) refused, with a typed error, on a
numpy it cannot run with."""

from __future__ import annotations

import re

import numpy as np
import triton

from ..errors import InterpreterNumpyError

# numpy 2.4 made int() of an array with ndim > 0 a TypeError ("only 0-dimensional arrays can be converted to Python
# scalars"); triton's interpreter before 3.7 does that at every index (interpreter.py: tensor.__index__ is
# int(self.handle.data); triton-lang/triton#9171, fixed in 3.7.0 by .squeeze()). setup.sh pins numpy 2.2.6.
NUMPY_BREAKS_AT = (2, 4)
TRITON_FIXED_AT = (3, 7)


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: '2.4.0rc1' -> (2, 4)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return int(found[1]), int(found[2])


def check_numpy() -> None:
    """Raise InterpreterNumpyError when this numpy breaks this triton's interpreter (numpy >= 2.4, triton < 3.7)."""
    if (
        release(np.__version__) >= NUMPY_BREAKS_AT
        and release(triton.__version__) < TRITON_FIXED_AT
    ):
        raise InterpreterNumpyError(
            f"triton {triton.__version__}'s CPU interpreter (TRITON_INTERPRET=1) does not run with numpy "
            f"{np.__version__}: install numpy<2.4 (setup.sh pins 2.2.6, constraints-cpu.txt) or triton>=3.7"
        )
