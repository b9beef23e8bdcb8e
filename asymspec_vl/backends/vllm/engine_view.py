"""An AsyncLLM as the vLLM backend sees an `LLM` (a server's engines, decoding while its event loop runs)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace


class EngineView:
    """An AsyncLLM as VLLMBackend sees an `LLM`: its config and engine core, its named worker RPCs as blocking calls
    (made from worker threads while the event loop runs the engine), and its shutdown."""

    def __init__(self, engine, loop: asyncio.AbstractEventLoop):
        self.engine, self.loop = engine, loop
        self.llm_engine = SimpleNamespace(
            vllm_config=engine.vllm_config, engine_core=engine.engine_core
        )

    def collective_rpc(self, method: str, args: tuple = ()) -> list:
        return asyncio.run_coroutine_threadsafe(
            self.engine.collective_rpc(method, args=args), self.loop
        ).result()

    def shutdown(self) -> None:
        self.engine.shutdown()

    @property
    def max_model_len(self) -> int:
        return int(self.engine.vllm_config.model_config.max_model_len)
