"""Keeping a command's stdout for its results: stdout_to_stderr() for a stretch of code, results_only_stdout()
for a whole command. Libraries' chatter ([Gloo] lines from torch.distributed's C++, vLLM's INFO log, engine
processes' prints) goes to stderr, so that stdout holds only the report (a table or JSON to pipe or save).

Both work on the file descriptor, since the C++ side and child processes write to fd 1 directly; Python's
sys.stdout is flushed on entry and exit so nothing printed before or after changes stream."""

from __future__ import annotations

import contextlib
import io
import os
import sys

# vLLM's logger writes to sys.stdout unless told otherwise (vllm/envs.py VLLM_LOGGING_STREAM, read at import)
VLLM_LOG_STREAM = ("VLLM_LOGGING_STREAM", "ext://sys.stderr")


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


@contextlib.contextmanager
def results_only_stdout():
    """For a whole command: vLLM logs to stderr (in this process and the engine processes it starts, which read
    the environment), fd 1 points at stderr for C++ code and child processes, and Python's print() still reaches
    the real stdout through a stream on a copy of it. Where sys.stdout is not the process's own (a caller
    captured it: tests, notebooks) only the environment is set."""
    os.environ.setdefault(*VLLM_LOG_STREAM)
    if sys.stdout is not sys.__stdout__ or sys.stdout is None:
        yield
        return
    try:
        sys.stdout.flush()
        saved = os.dup(sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor behind it
        yield
        return
    os.dup2(2, 1)
    original = sys.stdout
    results = open(
        saved,
        "w",
        encoding=original.encoding,
        errors=original.errors,
        closefd=False,
        buffering=1 if original.line_buffering else -1,
    )
    sys.stdout = results
    try:
        yield
    finally:
        results.flush()
        sys.stdout = original
        os.dup2(saved, 1)
        os.close(saved)
