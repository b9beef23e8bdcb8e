"""A SIGKILLed `asymspec-vl serve` (vLLM CPU build, the embedded pair) takes its vLLM engine processes with it:
the engine core's watchdog stops it once its parent is gone (asymspec_vl/backends/vllm/engine_life.py)."""

import psutil
import pytest
from serve_support import ServerProcess

pytestmark = pytest.mark.vllm

BOUND_S = 60  # the watchdog notices within a second; vLLM's shutdown then takes a few


def engine_processes(pid: int) -> list[psutil.Process]:
    """The vLLM processes (titled VLLM::...) under a process."""
    found = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if (p.cmdline() or [""])[0].startswith("VLLM::"):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_sigkilled_server_leaves_no_engine_process_behind(tmp_path):
    server = ServerProcess(
        [
            "--drafter",
            "embedded",
            "--verifier",
            "embedded",
            "--ocr",
            "none",
            "--no-caption-cache",
        ],
        tmp_path / "server.log",
    )
    engines = []
    try:
        server.wait_ready()
        engines = engine_processes(server.proc.pid)
        assert engines, (
            server.tail()
        )  # AsyncLLM runs its engine core in a process of its own
        server.proc.kill()
        server.proc.wait(30)
        gone, alive = psutil.wait_procs(engines, timeout=BOUND_S)
        assert not alive, (
            f"still running {BOUND_S} s after the server was SIGKILLed: {[p.pid for p in alive]}"
        )
    finally:
        server.proc.kill()
        for p in engines:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
