"""Run-time patches that add speculative method "asymspec" to vLLM 0.19 (the paper's Appendix E).

Loaded in every vLLM process through the `vllm.general_plugins` entry point (`register`), so `LLM(...)`
with or without multiprocessing and `vllm serve` all get them; `apply()` installs them explicitly.
Nothing in site-packages is modified: vLLM classes are wrapped attribute by attribute (_patching.install),
each hook calling vLLM's own method for every configuration but method "asymspec"; applying twice is a no-op.
Use:
    LLM(model=verifier, speculative_config={"method": "asymspec", "model": drafter,
                                            "num_speculative_tokens": K}, ...)
with per-request inputs in SamplingParams(extra_args=request_args.make_extra_args(...)).

The paper's patches (Appendix E), file by file:
  (1) per-request pixel_values / image_grid_thw from extra_args    request_args.py (schema), mm_cache.py
  (2) the vision tower once per request, for its x_full prefill   mm_cache.py
  (3) Qwen3-VL 3-D M-RoPE positions of the drafter's x_full        mrope.py
  (4) the image embeddings into the drafter's x_full prefill       full_view.py (FullView.images_for, first_pass)
  (5) the drafter reads x_full whatever its length                 full_view.py (FullView.open); switches.py
The rest of the method:
  the drafter's two views, b on x_comp, drafting                   proposer.py, full_view.py, comp_view.py,
                                                                   drafter_pass.py
  attention metadata for the drafter's own heads                   drafter_attention.py
  the x_full KV cache and its admission control                    full_view_pool.py, scheduler_patch.py (schedule)
  the drafter's logits a kept between steps                        draft_logits.py
  the gate / fusion in place of the rejection sampler              sampler.py (rules: asymspec_vl/core/methods.py,
  gate.py)
  per-request state, failures                                      rows.py, faults.py (tensor parallelism)
  the tokens emitted without a decision (prime, re-emit)           hidden_tokens.py
  per-request statistics and token labels                          stats.py
  named worker RPCs, probes, phase timing                          worker_extension.py, probe.py, phase_timing.py
  the drafter alone's images as pixels (its engine's vision tower)  pixel_inputs.py
vLLM's hooks, file by file:
  SpeculativeConfig.__init__ / uses_draft_model / compute_hash, EngineArgs.create_engine_config,
    SamplingParams._validate_spec_decode                                              config_patch.py
  DPCoordinator._wait_for_zmq_addrs                                                   dp_coordinator.py
  Sampler.apply_logits_processors, AsyncGPUModelRunnerOutput.get_output,
    TopKTopPSampler.forward_native (plain rows)                                       plain_sampler_patch.py
  GPUModelRunner: __init__, _update_states, execute_model, _prepare_inputs,
    _build_attention_metadata, _model_forward, _sample, propose_draft_token_ids,
    sample_tokens, profile_run                                                        runner_patch.py
  CPUModelRunner: __init__, load_model                                                cpu_patch.py
  Qwen2VLMultiModalDataParser._parse_image_data (Qwen2/3-VL)                          pixel_inputs.py
  Scheduler: __init__, add_request, schedule, _free_request, _preempt_request,
    update_from_output                                                                scheduler_patch.py
"""

from __future__ import annotations

import logging

from .hooks.config_patch import METHOD, patch_speculative_config
from .hooks.cpu_generators import patch_cpu_generators
from .hooks.cpu_patch import patch_cpu_runner
from .hooks.dp_coordinator import patch_dp_coordinator
from .hooks.engine_gauges import patch_engine_core
from .hooks.pixel_inputs import patch_pixel_inputs
from .hooks.plain_sampler_patch import patch_plain_sampler
from .hooks.runner_patch import patch_model_runner
from .hooks.scheduler_patch import patch_scheduler
from .requests.request_args import make_extra_args
from .switches import PATCH_SWITCHES, disabled
from .version import (
    SUPPORTED_VLLM_VERSIONS,
    UnsupportedVLLMVersionError,
    check_vllm_version,
    is_cpu_build,
)

__all__ = [
    "METHOD",
    "SUPPORTED_VLLM_VERSIONS",
    "UnsupportedVLLMVersionError",
    "apply",
    "register",
    "make_extra_args",
    "disabled",
    "PATCH_SWITCHES",
    "is_applied",
]

logger = logging.getLogger(__name__)
_applied = False


def apply() -> None:
    """Install the patches; raises UnsupportedVLLMVersionError on a vLLM other than 0.19.0 / 0.19.1."""
    global _applied
    check_vllm_version()
    if _applied:
        return

    patch_speculative_config()
    patch_model_runner()
    patch_plain_sampler()
    patch_scheduler()
    patch_engine_core()
    patch_pixel_inputs()
    patch_dp_coordinator()
    if is_cpu_build():
        patch_cpu_runner()
        patch_cpu_generators()
    _applied = True


def is_applied() -> bool:
    return _applied


def register() -> None:
    """vLLM general-plugin entry point: called once in every vLLM process. On an unsupported vLLM it
    installs nothing (so other uses of vLLM keep working) and warns; asking for method "asymspec" then
    fails in vLLM's own config validation, and `apply()` raises with the supported versions."""
    try:
        apply()
    except UnsupportedVLLMVersionError as e:
        logger.warning("%s The asymspec speculative method is not available.", e)
