"""Hooks on vLLM's own Sampler: a plain engine's dead-end rule, and our top-k / top-p filter for seeded batches.

The dead-end rule of a structured output (requests/plain_dead_ends.py); each is a pass-through unless the runner set
a Watch for the step:

  Sampler.apply_logits_processors       the Watch notes the structured rows left with no token (after vLLM's own
                                        processors, on the logits the Sampler then samples)
  AsyncGPUModelRunnerOutput.get_output  under async scheduling (a GPU's default for plain engines): the step's
                                        dead ends ride on the ModelRunnerOutput it returns, read after its event
The runner's sample_tokens hook (runner_patch.py) sets the Watch and puts the errors on a synchronous step's output;
the scheduler (scheduler_patch.update_from_output) finishes those requests before vLLM reads the step, so the token
the Sampler chose there is never appended to the request nor fed to its grammar.

And one that makes a seeded row's draw the transformers backend's at every batch size:

  TopKTopPSampler.forward_native        a batch holding a seeded row (a generator) filters top-k / top-p with vLLM's
                                        PyTorch sort (apply_top_k_top_p_pytorch, the rule of core/sampling.py
                                        filtered_logprobs). vLLM filters a batch of 8 or more rows with its Triton
                                        pivot search (apply_top_k_top_p_triton) on a GPU, whose kept set is another
                                        (on bf16-rounded logits at top_p 0.9 it differed in 5 rows of 8), so a
                                        seeded draw would depend on how many rows share its step. Unseeded batches,
                                        and the CPU build (forward_cpu: always the sort), are vLLM's as they are.
"""

from __future__ import annotations

import copy

from ..requests.plain_dead_ends import WATCH_ATTR, Watch
from ._patching import install

PENDING_ATTR = (
    "asymspec_pending_dead_ends"  # AsyncModelRunnerOutput attribute: its step's Watch
)


def patch_plain_sampler() -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import (  # lazy: loads vLLM
        TopKTopPSampler,
    )
    from vllm.v1.sample.sampler import Sampler  # lazy: loads vLLM
    from vllm.v1.worker.gpu_model_runner import (  # lazy: loads vLLM
        AsyncGPUModelRunnerOutput,
    )

    install(Sampler, "apply_logits_processors", apply_logits_processors)
    install(AsyncGPUModelRunnerOutput, "get_output", get_output)
    install(TopKTopPSampler, "forward_native", forward_native)


def forward_native(original, topk_topp, logits, generators, k, p):
    """vLLM's forward_native; with a seeded row in the batch, on logits [B, V] filtered first by PyTorch's sort
    (vLLM's own path below 8 rows), at any B."""
    if not generators or (k is None and p is None):
        return original(topk_topp, logits, generators, k, p)
    from vllm.v1.sample.ops.topk_topp_sampler import (  # lazy: loads vLLM
        apply_top_k_top_p_pytorch,
    )

    return original(
        topk_topp, apply_top_k_top_p_pytorch(logits, k, p), generators, None, None
    )


def apply_logits_processors(
    original, sampler, logits, sampling_metadata, predict_bonus_token
):
    watch: Watch | None = getattr(sampler, WATCH_ATTR, None)
    if watch is None:
        return original(sampler, logits, sampling_metadata, predict_bonus_token)
    return watch.look(
        logits, lambda lg: original(sampler, lg, sampling_metadata, predict_bonus_token)
    )


def with_errors(output, watch: Watch | None, errors_attr: str):
    """The step's output carrying its dead ends (req_id -> message) at `errors_attr`: now for a ModelRunnerOutput
    (vLLM's bookkeeping has synchronised), at get_output for an async one."""
    if watch is None or watch.read is None:
        return output
    if not hasattr(output, "req_ids"):  # AsyncGPUModelRunnerOutput
        setattr(output, PENDING_ATTR, (watch, errors_attr))
        return output
    errors = watch.errors()
    if not errors:
        return output
    output = copy.copy(output)  # never mark vLLM's shared EMPTY_MODEL_RUNNER_OUTPUT
    setattr(output, errors_attr, errors)
    return output


def get_output(original, async_output):
    output = original(
        async_output
    )  # waits for the step's copies, the Watch's among them
    pending = getattr(async_output, PENDING_ATTR, None)
    if pending is None:
        return output
    watch, errors_attr = pending
    return with_errors(output, watch, errors_attr)
