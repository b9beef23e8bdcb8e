"""toy/lm.py: the warm-up + cosine schedule against its formula, and train_lm on a tiny random Llama with a fixed
batch: the loss falls, the log records what the optimizer did (steps, lr, tokens), a parameter group scaled to
lr 0 stays put, and a tag head trains along on batches that carry tags."""

import math

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from asymspec_vl.toy.batches import Batch
from asymspec_vl.toy.lm import train_lm, warmup_cosine


@pytest.mark.parametrize("warmup, total", [(10, 100), (1, 5), (50, 50)])
def test_warmup_cosine_is_linear_then_a_cosine_to_the_floor(warmup, total):
    for step in range(warmup):
        assert warmup_cosine(step, total, warmup) == pytest.approx((step + 1) / warmup)
    for step in range(warmup, total + 20):
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        expected = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress))
        assert warmup_cosine(step, total, warmup) == pytest.approx(expected)
    assert (
        warmup_cosine(warmup, total, warmup) == 1.0
    )  # the peak, right after the warm-up
    assert warmup_cosine(total + 5, total, warmup, floor=0.2) == pytest.approx(
        0.2
    )  # past the end: the floor


def tiny_lm(seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=24,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def fixed_batch(tags=None) -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 24, (3, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0  # a padded row
    labels = ids.clone()
    labels[:, :3] = -100  # prompt positions are no targets
    labels[mask == 0] = -100
    return Batch(ids, mask, labels, tags=tags)


def test_train_lm_lowers_the_loss_and_logs_each_stretch():
    model, batch, log = tiny_lm(), fixed_batch(), []
    with torch.no_grad():
        before = model(**batch.inputs()).loss.item()
    final = train_lm(
        model,
        lambda step: batch,
        steps=30,
        lr=1e-2,
        log=log,
        name="verifier",
        warmup=5,
        log_every=10,
    )
    with torch.no_grad():
        after = model(**batch.inputs()).loss.item()
    assert after < before * 0.7 and final < before
    assert not model.training  # left in eval mode
    assert [r["step"] for r in log] == [10, 20, 30] and {r["stage"] for r in log} == {
        "verifier"
    }
    assert [r["tokens"] for r in log] == [
        10 * 22,
        20 * 22,
        30 * 22,
    ]  # 3 rows of 8, 2 padded
    assert log[-1]["lr"] == pytest.approx(
        1e-2 * warmup_cosine(30, 30, 5)
    )  # the schedule's last step: the floor
    assert log[-1]["loss"] == pytest.approx(
        final, abs=1e-4
    )  # the mean of the last stretch
    assert log[0]["loss"] > log[-1]["loss"]
    assert all("tag_loss" not in r for r in log)


def test_lr_scale_sets_each_parameters_rate():
    model, batch = tiny_lm(), fixed_batch()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_lm(
        model,
        lambda step: batch,
        steps=4,
        lr=1e-2,
        log=[],
        name="drafter",
        warmup=1,
        lr_scale=lambda name: 0.0 if "embed_tokens" in name else 1.0,
    )
    for name, p in model.named_parameters():
        assert torch.equal(p, frozen[name]) == ("embed_tokens" in name), name


class RecordingTagHead(nn.Module):
    """A tag head: digit logits from hidden states at the tagged positions; records what it is given."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 10)
        self.seen = []

    def loss(self, hidden_states, tags):
        self.seen.append((len(hidden_states), tags.clone()))
        h = hidden_states[1][tags[:, 0], tags[:, 1]]
        return nn.functional.cross_entropy(self.proj(h), tags[:, 2])


def test_a_tag_head_trains_along_on_tagged_batches_only():
    model, head = tiny_lm(), RecordingTagHead()
    tags = torch.tensor([[0, 4, 7], [1, 5, 2]])
    tagged, plain = fixed_batch(tags), fixed_batch()
    start = head.proj.weight.detach().clone()
    log = []
    train_lm(
        model,
        lambda step: tagged if step % 2 == 0 else plain,
        steps=6,
        lr=1e-2,
        log=log,
        name="drafter",
        warmup=1,
        log_every=3,
        tag_head=head,
        tag_weight=0.5,
    )
    assert len(head.seen) == 3  # steps 0, 2, 4
    assert all(
        n == 2 and torch.equal(t, tags) for n, t in head.seen
    )  # embeddings + 1 layer's hidden states
    assert not torch.equal(
        head.proj.weight, start
    )  # the head's parameters are in the optimizer
    assert all("tag_loss" in r for r in log)
