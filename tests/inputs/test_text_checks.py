"""inputs/user_text.py's check_text and core/method_names.py, directly: user text is a str of valid Unicode (a
lone surrogate, bytes or a number is an InvalidTextError naming the argument; None passes only where optional),
and the method names the command line lists are the decoding methods, in order, without importing torch."""

import subprocess
import sys

import pytest

from asymspec_vl.core.errors import InvalidTextError
from asymspec_vl.core.method_names import IMAGE_METHODS, NAMES
from asymspec_vl.inputs.user_text import check_text


def test_text_is_a_str_of_valid_unicode():
    assert check_text("question", "9 × 14 = ?") == "9 × 14 = ?"
    assert check_text("caption", None, optional=True) is None
    with pytest.raises(InvalidTextError, match="question must be a str, got NoneType"):
        check_text("question", None)
    with pytest.raises(InvalidTextError, match="ocr must be a str or None, got bytes"):
        check_text("ocr", b"7", optional=True)
    with pytest.raises(
        InvalidTextError,
        match=r"caption holds '\\ud800' at position 2: a lone surrogate",
    ):
        check_text("caption", "ab\ud800c")


def test_the_method_names_are_the_methods_in_order_and_load_without_torch():
    from asymspec_vl.core.methods import METHODS

    assert tuple(METHODS) == NAMES and set(IMAGE_METHODS) <= set(NAMES)
    reads_image = {
        m
        for m in NAMES
        if any(s.view in ("x_full", "x_question") for s in METHODS[m].sources)
    }
    assert reads_image == set(IMAGE_METHODS)
    probe = "import sys, asymspec_vl.core.method_names; print('torch' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )
