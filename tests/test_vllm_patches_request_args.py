"""vllm_patches.request_args edge cases on plain values: token-id bounds, image grids, what greedy means."""

import pytest
import torch

from vllm_patches.request_args import EngineFacts, RequestArgsError, check_greedy, parse_request_args

FACTS = EngineFacts(K=2, vocab_size=100, max_model_len=64, image_token_id=7, patch_dim=12, merge_size=2)


def args(**over):
    base = {"mode": "asymspec", "x_full": [1, 2, 7, 7, 3], "pixel_values": torch.zeros(8, 12),
            "image_grid_thw": torch.tensor([[1, 2, 4]])}
    return {"asymspec": {**base, **over}}


@pytest.mark.parametrize("field", ["x_full", "banned"])
def test_a_token_id_equal_to_the_vocabulary_size_is_refused(field):
    """Ids run 0..V-1: V itself would index past the drafter's embedding table."""
    parse_request_args(args(**{field: [1, 99, 7, 7, 3] if field == "x_full" else [99]}), FACTS)
    bad = [1, 100, 7, 7, 3] if field == "x_full" else [100]
    with pytest.raises(RequestArgsError, match=r"outside \[0, 100\): \[100\]"):
        parse_request_args(args(**{field: bad}), FACTS)


def test_video_like_grids_are_refused():
    """Qwen-VL images have t = 1; a grid with t = 2 (a video's, 2 frames: 16 patches, 4 merged tokens per
    frame... ) is not an image, even when its patch count matches the pixels."""
    from asymspec_vl.errors import InvalidImageError

    with pytest.raises(InvalidImageError, match="t = 1"):
        parse_request_args(args(pixel_values=torch.zeros(16, 12), image_grid_thw=torch.tensor([[2, 2, 4]]),
                                x_full=[1, 7, 7, 7, 7, 3]), FACTS)


@pytest.mark.parametrize("over", [{"temperature": 0.7}, {"repetition_penalty": 1.1}, {"presence_penalty": 0.5},
                                  {"frequency_penalty": 0.5}, {"logprobs": 2}, {"min_tokens": 2},
                                  {"logit_bias": {3: 1.0}}, {"bad_words": ["x"]}, {"allowed_token_ids": [1, 2]}])
def test_asymspec_rows_refuse_sampling_and_logits_processing(over):
    """The gate defines greedy decoding only: every sampling parameter that changes a step is refused."""
    from vllm import SamplingParams

    check_greedy(SamplingParams(temperature=0))
    with pytest.raises(RequestArgsError, match="greedily"):
        check_greedy(SamplingParams(**{"temperature": 0, **over}))
