"""CPU support for the asymspec path: vLLM 0.19's CPU runner refuses speculative decoding outright.

Three narrow changes, only for the "asymspec" method (other methods keep the stock refusal):
  1. CPUModelRunner.__init__ without its `spec decode is not supported` assertion (same steps otherwise);
  2. CPUModelRunner.load_model also loads the drafter (the GPU runner's load_model does);
  3. CPUModelRunner.warming_up_model first runs the GPU's profile-run pass: the whole token budget
     (GPUModelRunner.profile_run: `self._dummy_run(self.max_num_tokens, is_profile=True)`), so that the
     compiled verifier and drafter are first traced at the shapes a GPU engine first traces them at (the CPU
     warm-up alone traces at min(max(16, max_num_seqs), budget) tokens, a shape under which a buffer laid out
     wrongly for the whole budget goes unseen: issue 32, finding 1), then, as the profile run's
     _dummy_sampler_run, this engine's sampler at its largest step (runner_patch.profile_sampler; vLLM's
     rejection sampler, which that run calls first, needs the GPU build's kernels).
Nothing else on this path needs CUDA or triton: the proposer and the sampler are torch code, and the
proposer hands its drafts back as host lists, which skips the runner's CUDA-stream copy.
"""

from __future__ import annotations

import torch

from ._patching import install
from .config_patch import is_asymspec
from .runner_patch import profile_sampler


def patch_cpu_runner() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner  # lazy: loads vLLM

    install(CPUModelRunner, "__init__", init)
    install(CPUModelRunner, "load_model", load_model)
    install(CPUModelRunner, "warming_up_model", warming_up_model)


def init(original, runner, vllm_config, device) -> None:
    if not is_asymspec(vllm_config):
        return original(runner, vllm_config, device)
    from vllm.v1.worker import cpu_model_runner  # lazy: loads vLLM

    with cpu_model_runner._torch_cuda_wrapper():
        cpu_model_runner.GPUModelRunner.__init__(runner, vllm_config, device)
    assert device == torch.device("cpu")
    runner.use_cuda_graph = False
    runner.cascade_attn_enabled = False
    runner._postprocess_tensors()
    runner._postprocess_triton()


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
        profile_sampler(runner, last_hidden_states)
    original(runner)
