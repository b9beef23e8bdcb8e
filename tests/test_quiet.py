"""quiet.py: a command's stdout keeps its results only. What is written to file descriptor 1 (C++ code, child
processes) goes to stderr inside either context, Python's print() still reaches the real stdout inside
results_only_stdout, and both streams are as before afterwards. capfd captures the descriptors themselves."""

import os
import subprocess
import sys

from asymspec_vl.quiet import VLLM_LOG_STREAM, results_only_stdout, stdout_to_stderr


def command_stdout(monkeypatch):
    """The process's own stdout as a command has it when piped: a block-buffered stream on fd 1 (which capfd has
    pointed at a capture file), so what print() leaves in the buffer shows where the buffer is flushed to."""
    stream = open(1, "w", closefd=False, buffering=-1)  # noqa: SIM115 (flushed by the tests, fd 1 kept open)
    assert not stream.line_buffering
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "__stdout__", stream)


def test_stdout_to_stderr_moves_fd_1_and_print_for_a_stretch(capfd, monkeypatch):
    command_stdout(monkeypatch)
    print("before")
    with stdout_to_stderr():
        print("chatter")  # sys.stdout writes to fd 1, which points at stderr here
        os.write(1, b"c++ line\n")
        subprocess.run([sys.executable, "-c", "print('child')"], check=True)
    print("after")
    sys.stdout.flush()
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    # print()'s buffer reaches fd 1 (stderr then) when the stretch ends, after what was written to fd 1 directly
    assert err == "c++ line\nchild\nchatter\n"


def test_results_only_stdout_keeps_print_on_stdout_and_sends_the_rest_to_stderr(
    capfd, monkeypatch
):
    monkeypatch.delenv(VLLM_LOG_STREAM[0], raising=False)
    command_stdout(monkeypatch)
    print("before")
    with results_only_stdout():
        assert sys.stdout is not sys.__stdout__
        print("result")
        os.write(1, b"[Gloo] chatter\n")
        subprocess.run([sys.executable, "-c", "print('engine process')"], check=True)
        assert (
            os.environ[VLLM_LOG_STREAM[0]] == "ext://sys.stderr"
        )  # read by vLLM and its engine processes
    assert sys.stdout is sys.__stdout__
    print("after")
    sys.stdout.flush()
    os.write(1, b"fd 1 back\n")
    sys.stdout.flush()
    out, err = capfd.readouterr()
    assert out == "before\nresult\nafter\nfd 1 back\n"
    assert err == "[Gloo] chatter\nengine process\n"


def test_results_only_stdout_only_sets_the_environment_where_a_caller_captured_stdout(
    capfd, monkeypatch
):
    monkeypatch.setenv(
        VLLM_LOG_STREAM[0], "ext://sys.stdout"
    )  # a user's own choice is kept
    captured = sys.stdout
    assert captured is not sys.__stdout__  # pytest's capture
    with results_only_stdout():
        assert sys.stdout is captured
        os.write(1, b"fd 1 untouched\n")
    assert os.environ[VLLM_LOG_STREAM[0]] == "ext://sys.stdout"
    out, err = capfd.readouterr()
    assert out == "fd 1 untouched\n" and err == ""
