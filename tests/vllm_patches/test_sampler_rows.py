"""vllm_patches.sampler: a group's committed tokens land in their own rows of the step's output, placeholders past them."""

import torch

from vllm_patches.sampler import PLACEHOLDER, _put_rows


def test_a_groups_rows_of_different_lengths_keep_placeholders_past_their_tokens():
    out = torch.full((4, 3), PLACEHOLDER, dtype=torch.int32)
    out[1, 0] = 42  # a row of another group (a hidden token), untouched
    _put_rows(out, [3, 0, 2], [[5], [6, 7, 8], [9, 10]])
    assert out.tolist() == [[6, 7, 8], [42, -1, -1], [9, 10, -1], [5, -1, -1]]
    assert out.dtype == torch.int32
