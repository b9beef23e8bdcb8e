"""inputs/user_text.py on the real tokenizers: a prompt tokenized as template pieces and user text apart gives the
ids of tokenizing the whole prompt string, for every family's real chat template, one request or a conversation
(before: Mistral's SentencePiece v3 tokenizer got a stray "▁" token after "[INST] " and before every later piece,
its Metaspace writing "▁" before each piece's first word)."""

import pytest
from helpers import random_image

from asymspec_vl import Request
from asymspec_vl.inputs.prompts import encode_request
from asymspec_vl.inputs.user_text import encode_segments, sentinel, template_segments
from asymspec_vl.toy.real_vocab import FAMILIES

TEXTS = [
    "What is 12 + 3?",
    "  How many? \n",
    "line one\n\nline two ",
    "Zürich costs 1,250 €.",
    "x",
]


@pytest.fixture(scope="module")
def processor(real_shapes):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(real_shapes.model_dir("qwen3", "drafter"))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_requests_views_are_the_whole_prompts_ids(real_shapes, processor, family):
    tok = real_shapes.tokenizer(family)
    reqs = [
        Request(question=t, full_context=f"Facts: {t}", compressed_context=t)
        for t in TEXTS
    ]
    reqs.append(
        Request(random_image(1), "How many bars?", caption=" a chart ", ocr="12 30")
    )
    for r in reqs:
        enc = encode_request(r, processor, tok)
        assert (
            enc.comp.ids
            == tok(enc.prompts.x_comp, add_special_tokens=False)["input_ids"]
        ), (
            family,
            enc.prompts.x_comp,
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_a_conversations_segments_are_the_whole_prompts_ids(real_shapes, family):
    """System, user, assistant, user: the templates' pieces between texts ("\\n\\n" after Mistral's system text,
    Llama-3's headers, Qwen3's think block) tokenized apart from the texts."""
    tok = real_shapes.tokenizer(family)
    texts = ["Be brief.", "What is 2 + 2?", "4", " And times 3? "]
    roles = ["system", "user", "assistant", "user"]
    messages = [{"role": role, "content": sentinel(i)} for i, role in enumerate(roles)]
    segments = template_segments(tok, messages, len(messages))
    filled = [texts[s] if k % 2 else s for k, s in enumerate(segments)]
    whole = "".join(filled)
    assert (
        encode_segments(tok, filled)
        == tok(whole, add_special_tokens=False)["input_ids"]
    ), whole


@pytest.mark.parametrize("family", FAMILIES)
def test_a_conversation_with_a_system_message_encodes_for_every_verifier(
    real_shapes, processor, family
):
    """Mistral's template puts the system text in the last user turn, after the earlier turns' texts (before: a
    ChatTemplateError saying AsymSpec needs a ChatML-style template)."""
    from asymspec_vl import Conversation
    from asymspec_vl.inputs.conversation import encode_conversation

    tok = real_shapes.tokenizer(family)
    conv = Conversation(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And times 3?"},
        ]
    )
    enc = encode_conversation(conv, processor, tok)
    assert (
        enc.comp.ids == tok(enc.prompts.x_comp, add_special_tokens=False)["input_ids"]
    )
    assert "Be brief." in enc.prompts.x_comp and "Be brief." in enc.prompts.x_full
    if family.startswith("mistral"):
        assert enc.prompts.x_comp.index("4") < enc.prompts.x_comp.index("Be brief.")
