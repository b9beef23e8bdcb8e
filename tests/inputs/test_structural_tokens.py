"""Structural special tokens (image/vision/video pads and markers) are never emitted, even when both models
rank them first and every draft is rejected."""

import pytest
import torch
from helpers import random_request

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.inputs.vocab import STRUCTURAL_TOKENS


@pytest.fixture(scope="module")
def vision_obsessed(tiny_models):
    """A private pipeline whose verifier and drafter rank every structural token first (+50 logits)."""
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        device="cpu",
    )
    vocab = vl.pair.tokenizer.get_vocab()
    ids = [vocab[t] for t in STRUCTURAL_TOKENS if t in vocab]

    def boost(module, args, output):
        output.logits[..., ids] += 50.0  # [B, n, V]

    for model in (vl.backend.verifier, vl.backend.drafter):
        model.register_forward_hook(boost)
    return vl, set(ids)


@pytest.mark.parametrize(
    "method, cfg",
    [
        ("floor", AsymSpecConfig(max_new_tokens=12)),
        ("drafter", AsymSpecConfig(max_new_tokens=12)),
        ("sd", AsymSpecConfig(K=2, max_new_tokens=12)),
        ("scd", AsymSpecConfig(K=2, max_new_tokens=12)),
        (
            "asymspec",
            AsymSpecConfig(K=2, gate="fixed", gamma=1.0, max_new_tokens=12),
        ),  # forced rejections
        ("asymspec", AsymSpecConfig(K=4, bonus="fused", beta=2.0, max_new_tokens=12)),
    ],
)
def test_no_structural_token_is_emitted(vision_obsessed, method, cfg):
    vl, structural = vision_obsessed
    res = vl.generate_batch(
        [random_request(i) for i in range(3)], method=method, config=cfg
    )
    for r in res:
        assert len(r.token_ids) > 0 and not structural & set(r.token_ids)


def test_the_models_prefer_structural_tokens(vision_obsessed):
    vl, structural = vision_obsessed
    ids = vl.pair.tokenizer(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt"
    )["input_ids"]
    with torch.no_grad():
        top = vl.backend.verifier(input_ids=ids).logits[0, -1].argmax().item()
    assert top in structural
