"""Baselines through the same API: SD equals Floor; drafter-alone equals transformers' greedy generate."""

import pytest
import torch
from helpers import random_request

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.inputs.prompts import encode_request

CFG = AsymSpecConfig(K=2, max_new_tokens=16)


@pytest.fixture(scope="module")
def self_drafting_vl(tiny_models):
    """SD whose text drafter is the verifier itself: every draft passes, the bonus path is exercised."""
    return AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        text_drafter=str(tiny_models["verifier"]),
        device="cpu",
    )


@pytest.mark.parametrize("K", [2, 4])
def test_sd_tokens_equal_floor_tokens(tiny_vl, self_drafting_vl, K):
    reqs = [random_request(i) for i in range(8)]
    cfg = CFG.replace(K=K)
    floor = [
        r.token_ids for r in tiny_vl.generate_batch(reqs, method="floor", config=cfg)
    ]
    sd = tiny_vl.generate_batch(reqs, method="sd", config=cfg)
    assert [r.token_ids for r in sd] == floor
    sd_self = self_drafting_vl.generate_batch(reqs, method="sd", config=cfg)
    assert [r.token_ids for r in sd_self] == floor
    assert all(
        r.stats.acceptance_rate == 1.0 for r in sd_self
    )  # the verifier drafting for itself
    assert {t.source for r in sd_self for t in r.trace} == {"draft", "bonus"}


def test_drafter_alone_equals_transformers_generate(tiny_vl):
    pair, model = tiny_vl.pair, tiny_vl.backend.drafter
    for i in range(4):
        req = random_request(i)
        ours = tiny_vl.generate_batch([req], method="drafter", config=CFG)[0]
        enc = encode_request(req, pair.processor, pair.tokenizer).question
        ids = torch.tensor([enc.ids], device=model.device)
        ref = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=enc.pixel_values.to(model.device, model.dtype),
            image_grid_thw=enc.image_grid_thw.to(model.device),
            max_new_tokens=CFG.max_new_tokens,
            do_sample=False,
            suppress_tokens=pair.banned_ids(),
            eos_token_id=sorted(pair.stop_ids(CFG)),
            pad_token_id=pair.pad_id,
        )
        assert ours.token_ids == ref[0, ids.shape[1] :].tolist()
        assert (
            ours.prompts.x_question.count("<|image_pad|>") == 1
            and req.caption not in ours.prompts.x_question
        )


def test_floor_equals_transformers_generate_and_prompts_are_exact(tiny_vl):
    pair, model = tiny_vl.pair, tiny_vl.backend.verifier
    req = random_request(3)
    res = tiny_vl.generate_batch([req], method="floor", config=CFG)[0]
    ids = pair.tokenizer(
        res.prompts.x_comp, return_tensors="pt", add_special_tokens=False
    )["input_ids"].to(model.device)
    ref = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=16,
        do_sample=False,
        suppress_tokens=pair.banned_ids(),
        eos_token_id=sorted(pair.stop_ids(CFG)),
        pad_token_id=pair.pad_id,
    )
    assert res.token_ids == ref[0, ids.shape[1] :].tolist()
    # x_comp: caption + OCR + question in the verifier's template, thinking disabled; no image
    assert req.caption in res.prompts.x_comp and req.question in res.prompts.x_comp
    assert (
        "<think>\n\n</think>" in res.prompts.x_comp
        and "<|image_pad|>" not in res.prompts.x_comp
    )
    # x_full: the image plus the very same text
    assert (
        res.prompts.x_full.count("<|image_pad|>") == 1
        and req.caption in res.prompts.x_full
    )


def test_scd_runs_and_differs_from_floor_somewhere(tiny_vl):
    reqs = [random_request(i) for i in range(4)]
    scd = tiny_vl.generate_batch(reqs, method="scd", config=CFG)
    floor = tiny_vl.generate_batch(reqs, method="floor", config=CFG)
    assert all(len(r.token_ids) > 0 for r in scd)
    assert {t.source for r in scd for t in r.trace} <= {"draft", "contrastive"}
    assert [r.token_ids for r in scd] != [r.token_ids for r in floor]


def test_scd_at_alpha_one_gives_the_floor_tokens(tiny_vl):
    """With scd_alpha = 1 only the verifier's argmax is plausible: SCD decodes the verifier's greedy answer."""
    reqs = [random_request(i) for i in range(4)]
    cfg = CFG.replace(scd_alpha=1.0)
    scd = tiny_vl.generate_batch(reqs, method="scd", config=cfg)
    assert [r.token_ids for r in scd] == [
        r.token_ids for r in tiny_vl.generate_batch(reqs, "floor", cfg)
    ]
