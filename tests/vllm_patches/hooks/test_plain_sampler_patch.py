"""vllm_patches.hooks.plain_sampler_patch: a seeded batch of 8 or more rows is filtered by the project's top-k / top-p
rule (vLLM's PyTorch sort), not by vLLM's Triton pivot search, whose kept set is another; unseeded batches keep it.

Without a GPU, vLLM's Triton kernel runs in Triton's interpreter (conftest.py sets TRITON_INTERPRET=1): vLLM's own
import of Triton is a placeholder there (no active driver), so the kernel's module is run once more with Triton."""

import pytest
import torch

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.sampling import draw, filtered_logprobs
from asymspec_vl.doctor.topk_filter import ROWS, TOP_P, vllm_triton_filter
from asymspec_vl.doctor.topk_filter import bf16_logits as doctor_logits

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # the interpreter's
]
V = 4096


@pytest.fixture
def gpu_dispatch(monkeypatch):
    """vLLM's topk_topp_sampler as on a GPU: HAS_TRITON, its Triton filter (calls counted)."""
    import vllm.v1.sample.ops.topk_topp_sampler as ops

    import vllm_patches

    vllm_patches.apply()
    triton_filter, calls = vllm_triton_filter(), []
    monkeypatch.setattr(ops, "HAS_TRITON", True)
    monkeypatch.setattr(
        ops,
        "apply_top_k_top_p_triton",
        lambda *a: calls.append(1) or triton_filter(*a),
        raising=False,
    )
    return ops, calls


def kept(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x)


def test_a_seeded_batch_of_8_rows_is_filtered_and_drawn_as_the_project_does(
    gpu_dispatch,
):
    ops, calls = gpu_dispatch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits = doctor_logits(V, device)
    p = torch.full((ROWS,), TOP_P, device=device)
    cfg = AsymSpecConfig(temperature=1.0, top_p=TOP_P, seed=0)
    ours = filtered_logprobs(logits, cfg)
    # vLLM's own dispatch at 8 rows: the Triton kernel, and another kept set than the project's rule
    vllm_kept = kept(ops.apply_top_k_top_p(logits.clone(), None, p))
    assert calls and (vllm_kept != kept(ours)).any(-1).sum() >= 2
    calls.clear()

    sampler = ops.TopKTopPSampler(logprobs_mode="processed_logits")
    seeds = range(ROWS)
    gens = {
        i: torch.Generator(device=device).manual_seed(s) for i, s in enumerate(seeds)
    }
    tokens, processed = sampler.forward_native(logits.clone(), gens, None, p)
    assert not calls  # a seeded batch never meets the Triton kernel
    assert torch.equal(kept(processed), kept(ours))
    want = draw(ours, [torch.Generator(device=device).manual_seed(s) for s in seeds])
    assert tokens.tolist() == want.tolist()


def test_an_unseeded_batch_keeps_vllms_dispatch(gpu_dispatch):
    ops, calls = gpu_dispatch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits = doctor_logits(V, device)
    p = torch.full((ROWS,), TOP_P, device=device)
    sampler = ops.TopKTopPSampler(logprobs_mode="processed_logits")
    _, processed = sampler.forward_native(logits.clone(), {}, None, p)
    assert calls and torch.equal(
        kept(processed), kept(ops.apply_top_k_top_p(logits.clone(), None, p))
    )
