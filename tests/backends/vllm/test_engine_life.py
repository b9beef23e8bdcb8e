"""vLLM engine processes live no longer than the process that started them (asymspec_vl/backends/vllm/engine_life.py):
a child with the watchdog exits when its parent is SIGKILLed, closing an engine waits until its processes are gone,
and processes an earlier run left behind are named at start-up. The same on a real `asymspec-vl serve`:
test_serve_engine_life.py."""

import logging
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

PARENT = """
import multiprocessing, sys, time
from asymspec_vl.backends.vllm.engine_life import watch_parent

def child():
    watch_parent()
    time.sleep(600)

if __name__ == "__main__":
    p = multiprocessing.get_context(sys.argv[1]).Process(target=child)
    p.start()
    print(p.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_child_with_the_watchdog_exits_when_its_parent_is_sigkilled(
    tmp_path, start_method
):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), start_method], stdout=subprocess.PIPE, text=True
    )
    child = psutil.Process(int(parent.stdout.readline()))
    try:
        parent.kill()
        parent.wait(30)
        gone, alive = psutil.wait_procs([child], timeout=30)
        assert not alive
    finally:
        for p in (parent, child):
            try:
                p.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass


def test_the_engine_core_entry_point_is_wrapped_once_and_calls_vllms():
    from vllm.v1.engine.core import EngineCoreProc

    from asymspec_vl.backends.vllm import engine_life

    engine_life.tie_engine_cores()
    engine_life.tie_engine_cores()
    wrapped = EngineCoreProc.run_engine_core
    assert wrapped is engine_life.run_engine_core_tied
    assert (
        getattr(wrapped.__wrapped__, "__wrapped__", None) is None
    )  # vLLM's own function, not the wrap again


SLOW_EXIT = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (time.sleep(2), sys.exit(0)))\n"
    "print('ready', flush=True)\ntime.sleep(600)"
)


def test_closing_an_engine_waits_until_its_processes_are_gone():
    """vLLM's shutdown returns while its processes are still exiting (here: 2 s after SIGTERM)."""
    from asymspec_vl.backends.vllm.engine import shutdown_engine

    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_EXIT], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    client = SimpleNamespace(
        resources=SimpleNamespace(
            engine_manager=SimpleNamespace(processes=[proc]), coordinator=None
        ),
        shutdown=lambda: proc.send_signal(signal.SIGTERM),
    )
    try:
        shutdown_engine(SimpleNamespace(llm_engine=SimpleNamespace(engine_core=client)))
        assert (
            not psutil.pid_exists(proc.pid)
            or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        )
    finally:
        proc.kill()
        proc.wait()


ORPHAN = """
import os, sys, time, setproctitle
if os.fork():
    os._exit(0)
setproctitle.setproctitle(sys.argv[1] + "::EngineCore")
print(os.getpid(), flush=True)
time.sleep(float(sys.argv[2]))
"""


def orphan(prefix: str, lives_s: float) -> psutil.Process:
    """A process titled as vLLM titles an engine core, re-parented to init (its parent exited)."""
    starter = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, prefix, str(lives_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = int(starter.stdout.readline())
    starter.wait(30)
    proc = psutil.Process(pid)
    deadline = time.monotonic() + 10
    while proc.ppid() != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_engine_processes_an_earlier_run_left_are_named_and_waited_for(
    monkeypatch, caplog
):
    from asymspec_vl.backends.vllm import engine_life

    prefix = f"ASVTEST{os.getpid()}"
    monkeypatch.setenv("VLLM_PROCESS_NAME_PREFIX", prefix)
    assert engine_life.check_stale_engines(timeout=1) == []
    leaving, staying = orphan(prefix, 1.0), orphan(prefix, 600)
    try:
        assert {p.pid for p in engine_life.stale_engine_processes()} == {
            leaving.pid,
            staying.pid,
        }
        with caplog.at_level(
            logging.WARNING, logger="asymspec_vl.backends.vllm.engine_life"
        ):
            alive = engine_life.check_stale_engines(timeout=5)
        assert [p.pid for p in alive] == [
            staying.pid
        ]  # the other one exited while start-up waited
        said = " ".join(r.getMessage() for r in caplog.records)
        assert (
            f"pid {staying.pid} {prefix}::EngineCore" in said
            and "of an earlier run" in said
        )
        assert "still hold memory" in said
    finally:
        for p in (leaving, staying):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


STUCK_ENGINE = """
import signal, subprocess, sys, threading, time
from asymspec_vl.backends.vllm.engine_life import stop_self
signal.signal(signal.SIGTERM, lambda *a: None)  # a teardown that does not end in time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(worker.pid, flush=True)
threading.Thread(target=stop_self, args=(1.0,), daemon=True).start()
time.sleep(300)
"""


def test_a_stuck_engine_core_is_killed_with_its_workers_after_the_grace():
    """Issue 32, finding 7: the watchdog's SIGKILL could cut vLLM's worker teardown (up to 8 s) and leave a
    worker holding device memory. After GRACE_S (which outlasts that teardown) it kills the descendants first."""
    from asymspec_vl.backends.vllm.engine_life import GRACE_S

    assert (
        GRACE_S > 2 * 4.0
    )  # MultiprocExecutor._ensure_worker_termination: 4 s, SIGTERM, 4 s, SIGKILL
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK_ENGINE], stdout=subprocess.PIPE, text=True
    )
    worker = psutil.Process(int(proc.stdout.readline()))
    assert proc.wait(timeout=30) == -signal.SIGKILL
    worker.wait(
        timeout=10
    )  # psutil.TimeoutExpired if the worker outlived its engine core
    assert not worker.is_running()
