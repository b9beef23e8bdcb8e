"""CPU support for the asymspec path: vLLM 0.19's CPU runner refuses speculative decoding outright.

Four narrow changes, only for the "asymspec" method (other methods keep the stock refusal):
  1. CPUModelRunner.__init__ without its `spec decode is not supported` assertion (same steps otherwise);
  2. CPUModelRunner.load_model also loads the drafter (the GPU runner's load_model does);
  3. CPUModelRunner.warming_up_model first runs the GPU's profile-run pass: the whole token budget
     (GPUModelRunner.profile_run: `self._dummy_run(self.max_num_tokens, is_profile=True)`), so that the
     compiled verifier and drafter are first traced at the shapes a GPU engine first traces them at (the CPU
     warm-up alone traces at min(max(16, max_num_seqs), budget) tokens, a shape under which a buffer laid out
     wrongly for the whole budget goes unseen: issue 32, finding 1), then, as the profile run's
     _dummy_sampler_run, this engine's sampler at its largest step (runner_patch.profile_sampler; vLLM's
     rejection sampler, which that run calls first, needs the GPU build's kernels) when
     ASYMSPEC_VL_CPU_PROFILE_SAMPLER=1 (it sizes nothing on the CPU build).
  4. CPUModelRunner.__init__ compiles without inductor's indirect-indexing bounds checks unless the engine's
     compilation config sets `assert_indirect_indexing` itself (vLLM's own server and LLM(...) users alike): the
     CPU platform compiles the drafter with inductor's C++ backend, and torch 2.10's C++ code for the check of an
     indirect load under a mask of a non-vectorised loop index does not compile (`CppCompileError: no matching
     function for call to VecMask<long int, 4>::VecMask(int&)`). The drafter's interleaved M-RoPE traces exactly
     that: MRotaryEmbedding.forward_native (the CPU's) reads cos_sin_cache[positions] and
     apply_interleaved_rope's `x_t[..., 2:3 * s:3] = x[2, ..., 2:3 * s:3]` keeps positions[2]'s read only at
     every third frequency, a mask of the frequency loop in a kernel vectorised over tokens. Positions stay
     within the cache (vLLM bounds them by max_model_len). CUDA engines never run this patch: inductor's Triton
     code keeps its device asserts there.
Nothing else on this path needs CUDA or triton: the proposer and the sampler are torch code, and the
proposer hands its drafts back as host lists, which skips the runner's CUDA-stream copy.
"""

from __future__ import annotations

import os

import torch

from ._patching import install
from .config_patch import is_asymspec
from .runner_patch import profile_sampler

# The CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE, not by a memory profile, so the profile run's
# sampler pass only costs start-up time there (~28 s on 2 cores): run it when this is "1" (the tests that hold
# the GPU's profile-run order set it). GPUModelRunner.profile_run always runs it (runner_patch).
CPU_PROFILE_SAMPLER = "ASYMSPEC_VL_CPU_PROFILE_SAMPLER"


def patch_cpu_runner() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner  # lazy: loads vLLM

    install(CPUModelRunner, "__init__", init)
    install(CPUModelRunner, "load_model", load_model)
    install(CPUModelRunner, "warming_up_model", warming_up_model)


def init(original, runner, vllm_config, device) -> None:
    if not is_asymspec(vllm_config):
        return original(runner, vllm_config, device)
    from vllm.v1.worker import cpu_model_runner  # lazy: loads vLLM

    # before the models (and the drafter's config, which shares it) are built: their compile wrappers read it
    without_index_asserts(vllm_config.compilation_config)
    with cpu_model_runner._torch_cuda_wrapper():
        cpu_model_runner.GPUModelRunner.__init__(runner, vllm_config, device)
    assert device == torch.device("cpu")
    runner.use_cuda_graph = False
    runner.cascade_attn_enabled = False
    runner._postprocess_tensors()
    runner._postprocess_triton()


def without_index_asserts(compilation_config) -> None:
    """Inductor's indirect-indexing asserts off (4. above), unless the engine's compilation config sets them."""
    compilation_config.inductor_compile_config.setdefault(
        "assert_indirect_indexing", False
    )


def load_model(original, runner, load_dummy_weights: bool = False) -> None:
    original(runner, load_dummy_weights)
    if is_asymspec(runner.vllm_config):
        runner.drafter.load_model(runner.model)


def warming_up_model(original, runner) -> None:
    if is_asymspec(runner.vllm_config):
        from vllm.v1.worker.cpu_model_runner import (
            _set_global_compilation_settings,
        )  # lazy: loads vLLM

        with _set_global_compilation_settings(runner.vllm_config):
            # the GPU profile run's pass, traced first
            _, last_hidden_states = runner._dummy_run(
                runner.max_num_tokens, is_profile=True
            )
        if os.environ.get(CPU_PROFILE_SAMPLER) == "1":
            profile_sampler(runner, last_hidden_states)
    original(runner)
