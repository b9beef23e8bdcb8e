"""serve/engine_watch.py through the app on stand-in runners: an unexpected error is answered (never re-raised,
which makes uvicorn drop the client's connection), and a dead engine turns every answer and /health into a 503
and stops the server once."""

import time
from types import SimpleNamespace

import pytest


class EngineDeadError(Exception):
    """Named as vLLM's (is_engine_dead matches by name: the transformers backend runs without vLLM)."""


def client_of(runner, period_s=None):
    from starlette.testclient import TestClient

    from asymspec_vl.serve.app import create_app
    from asymspec_vl.serve.settings import ServeSettings

    app = create_app(
        ServeSettings("embedded", "embedded", backend="hf"), lambda s, loop: runner
    )
    if period_s is not None:
        app.state.serve.watch.period_s = period_s
    stops = []
    app.state.serve.watch.on_death = stops.append
    # raise_server_exceptions=True: an exception that Starlette re-raises after its 500 fails the request here
    return TestClient(app, raise_server_exceptions=True), app.state.serve, stops


def runner_with(gauges, health):
    from asymspec_vl.pair.shared_vocab import SharedVocabulary

    # the ready line names what the pair's vocabularies share
    vocabulary = SharedVocabulary(False, 8, 8, 8)
    return SimpleNamespace(
        vl=SimpleNamespace(pair=SimpleNamespace(vocabulary=vocabulary)),
        methods=("asymspec",),
        close=lambda: None,
        check_health=health,
        engine_gauges=gauges,
    )


async def healthy():
    return None


def test_an_unexpected_error_is_answered_not_re_raised():
    async def broken():
        raise RuntimeError("a bug in a route")

    client, state, stops = client_of(runner_with(broken, healthy))
    with client:
        reply = client.get("/metrics")
        assert (
            reply.status_code == 500 and reply.json()["error"]["type"] == "RuntimeError"
        )
        assert (
            client.get("/health").status_code == 200
            and state.watch.dead is None
            and not stops
        )


def test_a_request_that_meets_a_dead_engine_makes_every_answer_a_503_and_stops_the_server():
    async def dead():
        raise EngineDeadError("EngineCore encountered an issue")

    client, state, stops = client_of(runner_with(dead, healthy))
    with client:
        reply = client.get("/metrics")
        assert (
            reply.status_code == 503
            and "engine died" in reply.json()["error"]["message"]
        )
        assert client.get("/health").status_code == 503
        reply = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
        )
        assert (
            reply.status_code == 503
            and "must be restarted" in reply.json()["error"]["message"]
        )
    assert len(stops) == 1 and isinstance(state.watch.dead, EngineDeadError)


def test_the_watch_notices_a_dead_engine_with_no_request_in_flight():
    calls = []

    async def health():
        calls.append(1)
        if len(calls) >= 2:
            raise RuntimeError("the engine's health check") from EngineDeadError(
                "core gone"
            )

    client, state, stops = client_of(runner_with(healthy, health), period_s=0.05)
    with client:
        for _ in range(100):
            if stops:
                break
            time.sleep(0.05)
        assert client.get("/health").status_code == 503
    assert len(stops) == 1 and len(calls) >= 2


@pytest.mark.parametrize(
    "error, dead", [(EngineDeadError("x"), True), (RuntimeError("x"), False)]
)
def test_is_engine_dead_follows_the_cause(error, dead):
    from asymspec_vl.serve.engine_watch import is_engine_dead

    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = error
    assert is_engine_dead(error) is dead and is_engine_dead(wrapped) is dead


def watch_over(checks, **kw):
    """Run an EngineWatch (period 10 ms) over `checks` (one async callable per health check, the last repeated)
    until it has made len(checks) + 2 checks or declared death; -> (watch, deaths, checks made). Fails (a timeout)
    when the watch stops checking: a check that never returns must not stall it."""
    import asyncio

    from asymspec_vl.serve.engine_watch import EngineWatch

    async def run():
        watch, deaths, made = EngineWatch(period_s=0.01, **kw), [], []
        watch.on_death = deaths.append
        enough = asyncio.Event()

        async def check():
            made.append(1)
            if len(made) >= len(checks) + 2:
                enough.set()
            await checks[min(len(made), len(checks)) - 1]()

        task = asyncio.create_task(watch.run(check))
        done = asyncio.create_task(enough.wait())
        await asyncio.wait_for(
            asyncio.wait([task, done], return_when="FIRST_COMPLETED"), 5
        )
        task.cancel()
        done.cancel()
        return watch, deaths, len(made)

    return asyncio.run(run())


async def hangs():
    import asyncio

    await asyncio.sleep(3600)


async def fails():
    raise RuntimeError("the transformers runner's thread has stopped")


async def engine_dead():
    raise EngineDeadError("core gone")


def test_a_timed_out_health_check_is_not_death():
    """One check that gives no answer (a timeout), then healthy ones: the engine lives and the count restarts."""
    watch, deaths, made = watch_over([hangs, fails, healthy], timeout_s=0.05)
    assert not deaths and watch.dead is None and watch.failures == 0 and made >= 5


def test_failed_checks_are_death_only_when_dead_after_of_them_come_in_a_row():
    watch, deaths, _ = watch_over(
        [hangs, fails, healthy] * 3 + [healthy], timeout_s=0.05
    )
    assert not deaths  # never three in a row
    watch, deaths, made = watch_over([hangs, fails, hangs], timeout_s=0.05)
    assert len(deaths) == 1 and made == 3
    assert type(deaths[0]).__name__ == "EngineUnresponsiveError"
    assert str(deaths[0]) == (
        "3 health checks failed in a row, the last: no answer within 0.05 s"
    )


def test_engine_dead_is_death_at_the_first_check():
    watch, deaths, made = watch_over([engine_dead], timeout_s=0.05)
    assert made == 1 and len(deaths) == 1 and isinstance(deaths[0], EngineDeadError)
