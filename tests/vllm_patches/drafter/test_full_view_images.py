"""vllm_patches.drafter.full_view_images: a step's image embeddings made row by row and dropped once read."""

import pytest
import torch

from vllm_patches.drafter.full_view_images import FullViewImages

IMAGE = 7


def test_a_row_spanning_chunks_is_embedded_once_and_dropped_after_its_last_image_token():
    """Row 0: 1 text + 5 image tokens then 1 text token, read in chunks (0, 0..4), (0, 4..7) + row 1 (text only):
    its tower runs once, the chunks read its embeddings 0..2 then 3..4, and it is dropped after the second."""
    feeds = [[1] + [IMAGE] * 5 + [2], [3, 4]]
    calls = []

    def embed(req_id):
        calls.append(req_id)
        return (torch.arange(3.0).view(3, 1), torch.arange(3.0, 5.0).view(2, 1))

    images = FullViewImages(
        [("a", None, feeds[0]), ("b", None, feeds[1])],
        [torch.tensor(feeds[0]) == IMAGE, None],
        embed,
        None,
        (),
    )
    assert images.admit(0) and images.admit(1) and calls == ["a"]
    mask, parts = images.take([(0, 0, 4)])
    assert mask.tolist() == [False, True, True, True] and parts[0][:, 0].tolist() == [
        0,
        1,
        2,
    ]
    assert 0 in images.held
    mask, parts = images.take([(0, 4, 7), (1, 0, 2)])
    assert mask.tolist() == [True, True, False, False, False]
    assert [p[:, 0].tolist() for p in parts] == [[3.0, 4.0]]
    assert images.held == {} and images.peak == 5


def test_a_failing_vision_tower_fails_its_request_and_only_a_request_error_is_caught():
    failed = []

    def embed(req_id):
        raise ValueError("bad pixels")

    rows = [("a", "state", [IMAGE])]
    images = FullViewImages(
        rows, [torch.tensor([True])], embed, lambda *a: failed.append(a), (ValueError,)
    )
    assert not images.admit(0) and failed[0][:2] == ("a", "state") and images.held == {}
    strict = FullViewImages(rows, [torch.tensor([True])], embed, None, (RuntimeError,))
    with pytest.raises(ValueError):
        strict.admit(0)
