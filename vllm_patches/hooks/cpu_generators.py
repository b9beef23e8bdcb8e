"""A seeded request's generator on the CPU build rewound after a partial-prefill step, as vLLM rewinds CUDA ones, and
drawn from when its batch also holds rows without a seed.

On a partial prefill (chunked prefill: the prompt does not fit the step's token budget) vLLM samples a token for
the request and then discards it; `GPUModelRunner._bookkeeping_sync` undoes the draw with
`gen.set_offset(gen.get_offset() - 4)` (v1/worker/gpu_model_runner.py), which only a CUDA (Philox) generator
supports: a CPU generator raises `RuntimeError: CPU Generator does not use offset` and the engine core dies.
Here, for every engine on the CPU build: the discarded rows' CPU generators are snapshot before the step's
sampling and restored after it (the same undo: the request's stream does not depend on how its prompt was
chunked), and are out of the runner's generator table while vLLM's offset rewind runs.
A batch of seeded and unseeded rows (a seeded sampled request beside a greedy one on a plain engine: Floor, the
drafter alone): vLLM's CPU sampler (TopKTopPSampler.forward_cpu, v1/sample/ops/topk_topp_sampler.py:161) draws every
row unseeded unless every row has a generator, so the seeded row's tokens depend on its neighbours (the stress
run's drafter rows found it). Here such a batch takes forward_cpu's own seeded branch, which draws the unseeded rows
as before and the seeded ones from their generators (random_sample's rule, as every other platform does).
"""

from __future__ import annotations

import numpy as np
import torch

from ._patching import install


def patch_cpu_generators() -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import (  # lazy: loads vLLM
        TopKTopPSampler,
    )
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner  # lazy: loads vLLM

    install(CPUModelRunner, "_sample", sample)
    install(CPUModelRunner, "_bookkeeping_sync", bookkeeping_sync)
    install(TopKTopPSampler, "forward_cpu", forward_cpu)


def forward_cpu(original, sampler, logits, generators, k, p):
    """vLLM's forward_cpu, its seeded branch also for a batch where only some rows have a generator (it drew them
    all unseeded). -> (sampled ids [B], the logits or logprobs its logprobs_mode returns, or None)"""
    if not generators or len(generators) == logits.shape[0]:
        return original(sampler, logits, generators, k, p)
    from vllm.v1.sample.ops.topk_topp_sampler import (  # lazy: loads vLLM
        apply_top_k_top_p_pytorch,
        random_sample,
    )

    # forward_cpu's lines (v1/sample/ops/topk_topp_sampler.py:154-159) with random_sample's draw (:325), which is
    # forward_cpu's seeded branch (:164-170) with the unseeded rows drawn first
    logits = apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=True)
    logits_to_return = None
    if sampler.logprobs_mode == "processed_logits":
        logits_to_return = logits
    elif sampler.logprobs_mode == "processed_logprobs":
        logits_to_return = logits.log_softmax(dim=-1, dtype=torch.float32)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    return random_sample(probs, generators), logits_to_return


def discarded_cpu_generators(runner) -> dict[int, torch.Generator]:
    """batch index -> generator of this step's rows whose sampled token is discarded (a partial prefill)."""
    batch = runner.input_batch
    rows = np.nonzero(runner.discard_request_mask.np[: batch.num_reqs])[0]
    held = {int(i): batch.generators.get(int(i)) for i in rows}
    return {i: g for i, g in held.items() if g is not None and g.device.type == "cpu"}


def sample(original, runner, logits, spec_decode_metadata):
    states = {i: g.get_state() for i, g in discarded_cpu_generators(runner).items()}
    output = original(runner, logits, spec_decode_metadata)
    for i, state in states.items():
        runner.input_batch.generators[i].set_state(state)  # the discarded draw undone
    return output


def bookkeeping_sync(original, runner, *args, **kwargs):
    held = discarded_cpu_generators(runner)
    for i in held:
        del runner.input_batch.generators[
            i
        ]  # already rewound in `sample`: skip vLLM's offset rewind
    try:
        return original(runner, *args, **kwargs)
    finally:
        runner.input_batch.generators.update(held)
