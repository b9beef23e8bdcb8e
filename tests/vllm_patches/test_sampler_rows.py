"""vllm_patches.sampler: a group's committed tokens land in their own rows of the step's output, placeholders past
them."""

import torch

from vllm_patches.sampler import PLACEHOLDER, _put_rows


def test_a_groups_rows_of_different_lengths_keep_placeholders_past_their_tokens():
    out = torch.full((4, 3), PLACEHOLDER, dtype=torch.int32)
    out[1, 0] = 42  # a row of another group (a hidden token), untouched
    _put_rows(out, [3, 0, 2], [[5], [6, 7, 8], [9, 10]])
    assert out.tolist() == [[6, 7, 8], [42, -1, -1], [9, 10, -1], [5, -1, -1]]
    assert out.dtype == torch.int32


def test_the_stock_sampler_never_processes_the_logits_the_raw_logprobs_read():
    """Issue 32, finding 7: vLLM's sampler divides float32 logits by the temperature in place (its .to(float32)
    is no copy), and the step's logprobs are read from the same tensor afterwards: plain rows' raw logprobs came
    out processed. The stock sampler gets a copy of float32 logits."""
    from types import SimpleNamespace

    from vllm_patches.sampler import _stock

    def stock_sample(
        logits, spec_meta
    ):  # what vLLM's apply_temperature does to float32 logits
        logits.div_(0.5)
        return SimpleNamespace(sampled_token_ids=logits.argmax(-1, keepdim=True))

    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.randn(3, 8).to(dtype)
        raw = logits.clone()
        out = torch.full((3, 2), PLACEHOLDER, dtype=torch.int32)
        _stock(
            [0, 2],
            out,
            logits,
            None,
            stock_sample
            if dtype == torch.float32
            else lambda lg, meta: stock_sample(lg.float(), meta),
        )
        assert torch.equal(logits, raw), dtype
        assert out[0, 0] == raw[0].float().argmax() and out[1, 0] == PLACEHOLDER
