"""vllm_patches.hooks.dp_coordinator: vLLM's data-parallel coordinator start failing on its fixed 30 s limit (a
loaded machine) or on the process's death says which, and what to do; the start can be given more time. vLLM's own
wait runs on a stand-in coordinator with a stand-in clock (no data-parallel engine starts)."""

import multiprocessing
import multiprocessing.connection
import types

import pytest

from vllm_patches.hooks import dp_coordinator

pytestmark = pytest.mark.vllm


@pytest.fixture
def vllm_wait():
    """vLLM's DPCoordinator._wait_for_zmq_addrs as the plugin installs it (patched)."""
    from vllm.v1.engine.coordinator import DPCoordinator

    import vllm_patches

    vllm_patches.apply()
    return DPCoordinator._wait_for_zmq_addrs


def stand_in(alive: bool):
    """A coordinator whose process (pid 4321) is alive or has exited; its sentinel a pipe that never becomes ready."""
    sentinel, keep = multiprocessing.Pipe(duplex=False)
    return types.SimpleNamespace(
        proc=types.SimpleNamespace(
            pid=4321,
            exitcode=None if alive else 1,
            is_alive=lambda: alive,
            sentinel=sentinel,
            keep=keep,
        )
    )


def test_a_coordinator_still_starting_at_the_limit_names_the_load_and_the_fix(
    vllm_wait, monkeypatch
):
    waits = []  # the timeouts waited, ours then vLLM's; nothing arrives (the clock runs out)
    monkeypatch.setattr(
        multiprocessing.connection,
        "wait",
        lambda objs, timeout: waits.append(timeout) or [],
    )
    monkeypatch.delenv(dp_coordinator.WAIT_ENV, raising=False)
    reader, _writer = multiprocessing.Pipe(duplex=False)
    with pytest.raises(dp_coordinator.DataParallelStartError) as e:
        vllm_wait(stand_in(alive=True), reader)
    assert waits == [30]  # vLLM's alone
    message = str(e.value)
    for words in (
        "within 30 s",
        "still starting",
        "loaded machine",
        f"{dp_coordinator.WAIT_ENV}=120",
    ):
        assert words in message, words
    assert isinstance(e.value.__cause__, RuntimeError)

    waits.clear()
    monkeypatch.setenv(dp_coordinator.WAIT_ENV, "90")
    reader, _writer = multiprocessing.Pipe(duplex=False)
    with pytest.raises(dp_coordinator.DataParallelStartError, match="within 120 s"):
        vllm_wait(stand_in(alive=True), reader)
    assert waits == [90.0, 30]  # the time asked for, then vLLM's


def test_a_coordinator_that_died_points_at_its_own_error(vllm_wait):
    reader, writer = multiprocessing.Pipe(duplex=False)
    writer.close()  # the process is gone: its end of the pipe closed, nothing sent
    with pytest.raises(dp_coordinator.DataParallelStartError) as e:
        vllm_wait(stand_in(alive=False), reader)
    assert "exited (code 1)" in str(e.value) and "log above" in str(e.value)


def test_addresses_arriving_within_the_wait_are_returned(vllm_wait, monkeypatch):
    monkeypatch.setenv(dp_coordinator.WAIT_ENV, "5")
    reader, writer = multiprocessing.Pipe(duplex=False)
    writer.send(("front", "back", "out"))
    assert vllm_wait(stand_in(alive=True), reader) == ("front", "back", "out")


@pytest.mark.parametrize("text", ["-1", "soon", "inf"])
def test_a_bad_wait_is_refused_by_name(monkeypatch, text):
    monkeypatch.setenv(dp_coordinator.WAIT_ENV, text)
    with pytest.raises(
        dp_coordinator.DataParallelStartError, match=dp_coordinator.WAIT_ENV
    ):
        dp_coordinator.extra_wait_s()
