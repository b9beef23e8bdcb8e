"""The vocabulary facts every view and rule reads: the structural tokens never emitted, the banned-token mask, the
check that two models share one vocabulary (a pair's tokenizers and stop tokens: pair/model_pair.py)."""

from __future__ import annotations

import torch

from ..core.errors import VocabularyMismatchError

# Tokens that only mark or pad vision inputs: emitting one would corrupt the next forward.
STRUCTURAL_TOKENS = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Qwen3's thinking markers: every prompt here is built with thinking disabled, so x_comp holds a closed empty
# think block and x_full none; delta = a - b is then large on these tokens, and a fused argmax emitted them.
THINK_MARKERS = ("<think>", "</think>")


def token_mask(ids, vocab_size: int, device) -> torch.Tensor:
    """[V] bool, True at `ids` (the banned set every argmax skips)."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[list(ids)] = True
    return mask


def check_same_vocabulary(
    drafter_tok, verifier_tok, drafter: str, verifier: str
) -> None:
    """Two models that must read and write one set of ids (the drafter and SD's text drafter): the two
    tokenizers must map tokens to the same ids. (Drafter and verifier may differ: vocab_map.py.)"""
    dv, vv = drafter_tok.get_vocab(), verifier_tok.get_vocab()
    if dv != vv:
        only_d = len(set(dv.items()) - set(vv.items()))
        only_v = len(set(vv.items()) - set(dv.items()))
        raise VocabularyMismatchError(
            f"the drafter ({drafter}) and verifier ({verifier}) tokenizers differ: {len(dv)} vs {len(vv)} "
            f"tokens, {only_d} drafter and {only_v} verifier (token, id) pairs without a match. AsymSpec "
            "fuses logits token by token, so these two models must share one vocabulary (e.g. the Qwen3 family)."
        )
