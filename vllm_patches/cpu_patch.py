"""CPU support for the asymspec path: vLLM 0.19's CPU runner refuses speculative decoding outright.

Two narrow changes, only for the "asymspec" method (other methods keep the stock refusal):
  1. CPUModelRunner.__init__ without its `spec decode is not supported` assertion (same steps otherwise);
  2. CPUModelRunner.load_model also loads the drafter (the GPU runner's load_model does).
Nothing else on this path needs CUDA or triton: the proposer and the sampler are torch code, and the
proposer hands its drafts back as host lists, which skips the runner's CUDA-stream copy.
"""

from __future__ import annotations

import torch

from ._patching import wrap
from .config_patch import is_asymspec


def patch_cpu_runner() -> None:
    from vllm.v1.worker import cpu_model_runner as cmr

    runner_cls = cmr.CPUModelRunner

    def make_init(orig):
        def __init__(self, vllm_config, device):
            if not is_asymspec(vllm_config):
                return orig(self, vllm_config, device)
            with cmr._torch_cuda_wrapper():
                cmr.GPUModelRunner.__init__(self, vllm_config, device)
            assert device == torch.device("cpu")
            self.use_cuda_graph = False
            self.cascade_attn_enabled = False
            self._postprocess_tensors()
            self._postprocess_triton()
        return __init__

    def make_load_model(orig):
        def load_model(self, load_dummy_weights: bool = False) -> None:
            orig(self, load_dummy_weights)
            if is_asymspec(self.vllm_config):
                self.drafter.load_model(self.model)
        return load_model

    wrap(runner_cls, "__init__", make_init)
    wrap(runner_cls, "load_model", make_load_model)
