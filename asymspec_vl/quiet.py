"""stdout_to_stderr(): libraries' chatter ([Gloo] lines from torch.distributed's C++, vLLM's INFO log) goes to
stderr while engines start and run, so that a command's stdout holds only its report (a table to pipe or save).

It works on the file descriptor, since the C++ side writes to fd 1 directly; Python's sys.stdout is flushed on
entry and exit so nothing printed before or after changes stream."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def stdout_to_stderr():
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
