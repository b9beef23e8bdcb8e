"""backends/vllm/engine_view.py: a server's AsyncLLM as the vLLM backend sees an `LLM`: its named worker RPCs as
blocking calls made from a worker thread while the event loop keeps running (the engine decodes meanwhile), its
config and engine core, max_model_len, and shutdown (a stand-in AsyncLLM: the view adds no engine of its own)."""

import asyncio
from types import SimpleNamespace

from asymspec_vl.backends.vllm.engine_view import EngineView


class StandInAsyncLLM:
    def __init__(self):
        self.vllm_config = SimpleNamespace(
            model_config=SimpleNamespace(max_model_len=2048)
        )
        self.engine_core, self.calls, self.stopped = object(), [], False

    async def collective_rpc(self, method, args=()):
        await asyncio.sleep(0.01)  # the loop must keep running for the call to finish
        self.calls.append((method, args))
        return [f"{method}{args}"]

    def shutdown(self):
        self.stopped = True


def test_the_view_calls_worker_rpcs_from_a_thread_while_the_loop_runs():
    engine = StandInAsyncLLM()

    async def serve():
        view = EngineView(engine, asyncio.get_running_loop())
        ticks = []

        async def heartbeat():  # the event loop is not blocked while the RPC waits
            for _ in range(3):
                ticks.append(1)
                await asyncio.sleep(0.005)

        beat = asyncio.create_task(heartbeat())
        result = await asyncio.to_thread(
            view.collective_rpc, "asymspec_image_embeddings", (1, 2)
        )
        await beat
        return view, result, ticks

    view, result, ticks = asyncio.run(serve())
    assert result == ["asymspec_image_embeddings(1, 2)"] and engine.calls == [
        ("asymspec_image_embeddings", (1, 2))
    ]
    assert len(ticks) == 3
    assert (
        view.max_model_len == 2048 and view.llm_engine.vllm_config is engine.vllm_config
    )
    assert view.llm_engine.engine_core is engine.engine_core
    view.shutdown()
    assert engine.stopped
