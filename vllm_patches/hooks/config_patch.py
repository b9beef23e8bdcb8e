"""Speculative method "asymspec": accepted by SpeculativeConfig and treated as a draft-model method.

vLLM validates `method` against a Literal, so "asymspec" is built as "draft_model" (the draft ModelConfig,
parallel config and max_model_len come out exactly as for a draft model) and then renamed. The drafter's
proposals are consumed after the runner's bookkeeping (disable_padded_drafter_batch), where the committed
tokens are plain lists; async scheduling stays off (vLLM allows it for EAGLE/draft_model only). The drafter
is compiled and its decode-shaped passes replay CUDA graphs as the verifier's engine allows
(drafter_graphs.py); the speculative config's enforce_eager=True keeps every drafter pass eager. vLLM's V2
GPU model runner (VLLM_USE_V2_MODEL_RUNNER=1) is refused: the patches hook the V1 runner. An asymspec request
(extra_args["asymspec"]) may set min_p, which vLLM refuses with speculative decoding (SamplingParams
_validate_spec_decode): its method's sampled rule applies it. Engines get the asymspec worker extension (named worker
RPCs) unless they name another. vLLM's draft-model check that both models have one logit count is skipped for
"asymspec": a cross-family pair (two vocabularies) crosses the workers' vocabulary map (requests/engine_map.py),
whose build refuses two logit counts under one vocabulary (VocabularyMismatchError).

Compile cache: vLLM keys its on-disk compiled graphs (the AOT artifacts, compilation/decorators.py, loaded with
their guards dropped; the piecewise inductor cache, compilation/backends.py) by VllmConfig.compute_hash, whose
speculative factor (SpeculativeConfig.compute_hash) names neither the method nor any code of ours. For "asymspec" it
also hashes the method, the installed asymspec-vl version and the drafter's traced-call layout
(version.DRAFTER_TRACE_LAYOUT): the verifier's and the drafter's VllmConfig both hold the speculative config, so an
upgrade, or a stock draft_model engine on the same pair, never replays another's graphs.
Pipeline parallelism is refused by name (core/parallelism.py): vLLM makes the drafter on the last pipeline rank only.
"""

from __future__ import annotations

import hashlib

from asymspec_vl.core.parallelism import refuse_pipeline_parallelism

from ..version import DRAFTER_TRACE_LAYOUT, asymspec_vl_version, is_cpu_build
from ._patching import install

METHOD = "asymspec"


def is_asymspec(vllm_config) -> bool:
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and spec.method == METHOD


def _asks_for_asymspec(speculative_config) -> bool:
    return (
        isinstance(speculative_config, dict)
        and speculative_config.get("method") == METHOD
    )


def patch_speculative_config() -> None:
    from vllm.config.speculative import SpeculativeConfig  # lazy: loads vLLM
    from vllm.engine.arg_utils import EngineArgs  # lazy: loads vLLM
    from vllm.sampling_params import SamplingParams  # lazy: loads vLLM

    install(SpeculativeConfig, "__init__", speculative_config_init)
    install(SpeculativeConfig, "uses_draft_model", uses_draft_model)
    install(
        SpeculativeConfig,
        "verify_equal_vocab_size_if_draft_model",
        verify_equal_vocab_size,
    )
    install(SpeculativeConfig, "compute_hash", speculative_config_hash)
    install(EngineArgs, "create_engine_config", create_engine_config)
    install(SamplingParams, "_validate_spec_decode", validate_spec_decode)


def compile_key_factors() -> list[str]:
    """What of ours decides an asymspec engine's compiled graphs: the method, the installed asymspec-vl version,
    and the drafter's traced-call layout (bumped by hand when that call changes; vllm_patches/version.py)."""
    return [
        METHOD,
        asymspec_vl_version(),
        f"drafter-trace-layout-{DRAFTER_TRACE_LAYOUT}",
    ]


def speculative_config_hash(original, spec) -> str:
    """vLLM's hash of the speculative config, with compile_key_factors for "asymspec". VllmConfig.compute_hash holds
    it, and both compile caches are keyed by that (the AOT artifacts: compilation/caching.py
    aot_compile_hash_factors; the piecewise cache: compilation/backends.py VllmBackend.__call__ config_hash), for
    the verifier and for the drafter (whose VllmConfig is the engine's with the draft model config)."""
    if spec.method != METHOD:
        return original(spec)
    factors = [original(spec), *compile_key_factors()]
    return hashlib.sha256(str(factors).encode()).hexdigest()


def speculative_config_init(original, spec, *args, **kwargs) -> None:
    if kwargs.get("method") != METHOD:
        return original(spec, *args, **kwargs)
    _refuse_v2_runner()
    _BUILDING.append(spec)
    try:
        original(
            spec,
            *args,
            **{**kwargs, "method": "draft_model", "disable_padded_drafter_batch": True},
        )
    finally:
        _BUILDING.pop()
    spec.method = METHOD
    _check(spec)


_BUILDING: list = []  # the asymspec SpeculativeConfig being built (vLLM validates it as a draft model inside)


def verify_equal_vocab_size(original, spec) -> None:
    """vLLM's check that the draft model has the target's logit count, except for "asymspec" (a cross-family pair
    crosses the workers' vocabulary map)."""
    if spec.method == METHOD or any(spec is s for s in _BUILDING):
        return None
    return original(spec)


def validate_spec_decode(original, params, speculative_config) -> None:
    """vLLM refuses min_p with speculative decoding (its rejection sampler has none); an asymspec request's
    min_p is its method's sampled rule's (vllm_patches/sampler.py), so it passes (logit_bias stays vLLM's
    refusal). A plain request (no asymspec args) that does not decode greedily goes to vLLM's rejection sampler,
    which the CPU build lacks (Triton kernels): refused here, where the input processor checks a request (a
    server's 400 naming the fix), not failed by the workers (a server's bare 500)."""
    from ..requests.request_args import (  # lazy: loads torch
        decodes_greedily,
        has_request_args,
    )

    if getattr(speculative_config, "method", None) == METHOD:
        if has_request_args(params.extra_args):
            if not params.logit_bias:
                return None
        elif not decodes_greedily(params) and is_cpu_build():
            from ..requests.request_args import RequestArgsError  # lazy: loads torch

            raise RequestArgsError(
                f"speculative method {METHOD!r} on vLLM's CPU build: a request without asymspec arguments "
                "goes to vLLM's rejection sampler, which needs a GPU. Send temperature=0 with no penalties, "
                "logit_bias, bad_words, allowed_token_ids or min_tokens; or sample through an asymspec "
                'request (extra_args["asymspec"]; a server\'s vllm_xargs, docs/gpu-and-vllm.md), whose '
                "methods sample on the CPU build"
            )
    return original(params, speculative_config)


def uses_draft_model(original, spec) -> bool:
    return spec.method == METHOD or original(spec)


def create_engine_config(original, engine_args, *args, **kwargs):
    if _asks_for_asymspec(engine_args.speculative_config):
        refuse_pipeline_parallelism(
            engine_args.pipeline_parallel_size, "pipeline_parallel_size"
        )
    if (
        _asks_for_asymspec(engine_args.speculative_config)
        and not engine_args.worker_extension_cls
    ):
        from .worker_extension import WORKER_EXTENSION  # lazy: loads torch

        engine_args.worker_extension_cls = WORKER_EXTENSION
    config = original(engine_args, *args, **kwargs)
    if is_asymspec(config):
        refuse_dp_with_moe(config.parallel_config)
    return config


def refuse_dp_with_moe(parallel_config) -> None:
    """With data parallelism and a MoE (or not yet known) verifier, every forward context is a DP collective
    (vLLM's set_forward_context coordinates the token counts across DP ranks, forward_context.py), and DP ranks
    run different numbers of drafter passes per step (their batches differ): they would pair the wrong passes
    or hang. Refused until the drafter agrees its passes across DP ranks."""
    if (
        parallel_config.data_parallel_size > 1
        and parallel_config.is_moe_model is not False
    ):
        raise ValueError(
            f"speculative method {METHOD!r} with data_parallel_size="
            f"{parallel_config.data_parallel_size} needs a dense (non-MoE) verifier: with a MoE "
            "verifier every drafter pass would be a data-parallel collective, and the ranks run "
            "different numbers of them. Use tensor parallelism, or one engine per GPU."
        )


def _refuse_v2_runner() -> None:
    import vllm.envs as envs  # lazy: loads vLLM

    if envs.VLLM_USE_V2_MODEL_RUNNER:
        raise ValueError(
            f"speculative method {METHOD!r} runs on vLLM's V1 GPU model runner; unset "
            "VLLM_USE_V2_MODEL_RUNNER (or set it to 0): the V2 runner has none of the hooks the "
            "asymspec patches install"
        )


def _check(spec) -> None:
    target, draft = spec.target_model_config, spec.draft_model_config
    if target is None or draft is None:
        return
    if target.is_multimodal_model:
        raise ValueError(
            f"speculative method {METHOD!r}: the target (verifier) must be a text-only model; "
            f"{target.model} is multimodal. The drafter reads the images."
        )
    # two logit counts: a cross-family pair, whose map the workers build (requests/engine_map.py); its build
    # refuses two logit counts under one vocabulary
