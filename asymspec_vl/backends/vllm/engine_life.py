"""The life of vLLM's engine processes, tied to the process that started them: they exit when it dies (even by
SIGKILL), a closed engine's processes are gone before the next engine starts, and processes an earlier run left
behind are named (and waited for, a while) at start-up.

vLLM 0.19 starts an engine core in a process of its own (`CoreEngineProcManager`, v1/engine/utils.py) whenever the
front end is AsyncLLM (`asymspec-vl serve`) or the LLM class runs multiprocess (the default on GPUs); that
process's own workers (MultiprocExecutor, tensor parallel) watch a death pipe from it and exit with it. The engine
core itself watches nothing: when the process that started it is SIGKILLed it stays (re-parented to init) with its
weights, KV cache and, on a GPU, the device memory the next engine needs. `tie_engine_cores()` wraps the engine
core's entry point (`EngineCoreProc.run_engine_core`, the Process target) so that the child first starts a watchdog
thread: when its parent is gone (its multiprocessing sentinel closes, or the parent pid changes) it asks the engine
to stop with SIGTERM (vLLM's own graceful shutdown, which also stops the workers: MultiprocExecutor gives them 4 s,
SIGTERMs them, 4 s more, then SIGKILLs them) and GRACE_S later, if that did not end it, kills what is left of its
descendants and then itself (`stop_self`): a worker never outlives it holding device memory. The wrap is a
module-level function, so it reaches children by name under fork and spawn.

vLLM's `shutdown` (v1/utils.py) terminates the engine cores, joins them for at most 5 s and then SIGKILLs what is
left without waiting; workers leave after their engine core. `wait_gone` bounds the wait for all of them."""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import threading

import psutil

logger = logging.getLogger(__name__)

GRACE_S = 20.0  # after SIGTERM, how long an orphaned engine core may take to stop (vLLM's worker teardown: up to 8 s)
CLOSE_WAIT_S = 60.0  # how long closing an engine waits for its processes to exit
STALE_WAIT_S = 30.0  # how long start-up waits for an earlier run's orphaned engine processes to exit


def tie_engine_cores() -> None:
    """Make every engine core process started from now on exit when the process that started it dies
    (idempotent)."""
    from vllm.v1.engine.core import EngineCoreProc  # lazy: loads vLLM

    if getattr(EngineCoreProc.run_engine_core, "__wrapped__", None) is None:
        run_engine_core_tied.__wrapped__ = EngineCoreProc.run_engine_core
        EngineCoreProc.run_engine_core = staticmethod(run_engine_core_tied)


def run_engine_core_tied(*args, **kwargs):
    """vLLM's engine core main, with a watchdog on the parent process."""
    from vllm.v1.engine.core import EngineCoreProc  # lazy: loads vLLM

    watch_parent()
    original = getattr(
        EngineCoreProc.run_engine_core, "__wrapped__", EngineCoreProc.run_engine_core
    )
    return original(*args, **kwargs)


def watch_parent() -> None:
    """In a multiprocessing child: a daemon thread that stops this process once its parent is gone."""

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        while os.getppid() == parent.pid:
            parent.join(1.0)  # returns early when the parent's sentinel closes
            if not parent.is_alive():
                break
        logger.warning(
            "asymspec-vl: the process that started this vLLM engine (pid %s) is gone: stopping the "
            "engine",
            parent.pid,
        )
        stop_self()

    threading.Thread(target=watch, name="asymspec-parent-watchdog", daemon=True).start()


def stop_self(grace_s: float = GRACE_S) -> None:
    """SIGTERM this process (vLLM's engine core shuts down on it, its workers with it); if it still runs grace_s
    later, SIGKILL its descendants (workers whose teardown was cut short) and then itself."""

    me = psutil.Process()
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(grace_s)
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()
    os.kill(os.getpid(), signal.SIGKILL)


def engine_processes(client) -> list:
    """psutil.Process of one engine's OS processes: its engine cores (a multiprocess client) or its executor's
    workers (an in-process engine), with their descendants. `client`: an LLMEngine's / AsyncLLM's engine_core."""

    resources = getattr(client, "resources", None)
    procs = list(
        getattr(getattr(resources, "engine_manager", None), "processes", None) or []
    )
    coordinator = getattr(resources, "coordinator", None)
    if getattr(coordinator, "proc", None) is not None:
        procs.append(coordinator.proc)
    executor = getattr(getattr(client, "engine_core", None), "model_executor", None)
    procs += [
        w.proc
        for w in getattr(executor, "workers", None) or []
        if getattr(w, "proc", None) is not None
    ]
    found = []
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            found += [root, *root.children(recursive=True)]
        except (
            psutil.NoSuchProcess,
            TypeError,
        ):  # gone already, or never started (pid None)
            continue
    return found


def shut_down(client, stop) -> None:
    """stop() an engine (its shutdown), then wait until the processes it had are gone. client: its engine_core."""
    procs = engine_processes(client)
    stop()
    wait_gone(procs)


def wait_gone(procs: list, timeout: float = CLOSE_WAIT_S) -> list:
    """Wait (at most `timeout` s) for the processes to exit, then SIGKILL what is left and wait 5 s more; the
    processes still alive after that (logged)."""

    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=5.0)
    if alive:
        logger.warning(
            "asymspec-vl: vLLM engine processes %s did not exit; they may still hold memory",
            [p.pid for p in alive],
        )
    return alive


def collect_closed_engines() -> None:
    """Collect what closed in-process engines left, frozen or not, and leave the heap as frozen as it was.

    vLLM's engine core freezes this process's heap when it starts (EngineCore.__init__ -> freeze_gc_heap,
    v1/engine/core.py: every object alive then goes to the permanent generation, which no collection visits, so
    that full collections while serving skip the start-up heap) and unfreezes it only in
    cleanup_dist_env_and_memory, which runs once no engine is left. An engine closed while another lives was
    frozen (by its own start and the other's): its model, KV cache and VllmConfig, cyclic garbage, stayed until
    the last engine closed (1 GiB of KV cache per evicted engine on the CPU build). Unfreeze, collect, and freeze
    again what survives (the live engines' start-up heap, as vLLM wants it; the cache closes engines between
    batches, so no request's state is frozen with it); a heap nobody froze stays unfrozen."""
    frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()


def stale_engine_processes(prefix: str | None = None) -> list:
    """This user's vLLM engine processes whose starting process is gone (re-parented to init): what an earlier
    run, killed, left behind."""

    prefix = prefix or os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM")
    me = os.getuid()
    stale = []
    for proc in psutil.process_iter(["cmdline", "ppid", "uids"]):
        info = proc.info
        title = (info.get("cmdline") or [""])[0]
        if (
            title.startswith(prefix + "::")
            and info.get("ppid") == 1
            and info.get("uids")
            and info["uids"].real == me
        ):
            stale.append(proc)
    return stale


def check_stale_engines(timeout: float = STALE_WAIT_S) -> list:
    """At start-up: name the vLLM engine processes an earlier run left, wait a while for them to exit (an
    orphaned engine core stops itself within GRACE_S), and warn about those that stay; returns those."""
    stale = stale_engine_processes()
    if not stale:
        return []
    logger.warning(
        "asymspec-vl: vLLM engine processes of an earlier run are still running (%s); waiting up to "
        "%.0f s for them to exit",
        _listed(stale),
        timeout,
    )

    _, alive = psutil.wait_procs(stale, timeout=timeout)
    if alive:
        logger.warning(
            "asymspec-vl: stale vLLM engine processes still hold memory (on a GPU, the device memory a "
            "new engine needs): %s. Stop them (kill PID) if vLLM cannot start.",
            _listed(alive),
        )
    return alive


def _listed(procs: list) -> str:

    out = []
    for p in procs:
        try:
            out.append(
                f"pid {p.pid} {p.cmdline()[0].strip()} {p.memory_info().rss / 2**30:.1f} GiB"
            )
        except psutil.Error:
            out.append(f"pid {p.pid}")
    return ", ".join(out)
