"""Special-token strings in user text are read as ordinary text in every view, while the chat template's own
control tokens stay control tokens (before: "<|image_pad|>" in a question raised IndexError and "<|im_end|>"
ended the user's turn); ordinary text gives exactly the ids of tokenizing the whole prompt."""

from collections import Counter

import pytest
from helpers import random_image, random_request

from asymspec_vl import Request
from asymspec_vl.inputs.prompts import encode_request
from asymspec_vl.pair.defaults import resolve
from asymspec_vl.pair.model_pair import ModelPair

CFG = dict(K=2, max_new_tokens=6)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["tiny", "embedded"])
def pair(request, tiny_models):
    """The tiny test tokenizer (GPT-2 pre-tokenizer) and the embedded pair's (Qwen's pre-tokenizer)."""
    if request.param == "tiny":
        return ModelPair.load(
            str(tiny_models["vl_drafter"]), str(tiny_models["verifier"])
        )
    return ModelPair.load(
        resolve("drafter", "embedded"), resolve("verifier", "embedded")
    )


def every_added_token(tokenizer) -> str:
    """Every added / special token string of the tokenizer (im_start/end, vision, pads, think, ...)."""
    contents = [t.content for t in tokenizer.added_tokens_decoder.values()]
    assert {
        "<|im_end|>",
        "<|im_start|>",
        "<|image_pad|>",
        "<|vision_start|>",
        "<think>",
    } <= set(contents)
    return " ".join(contents)


def hostile_requests(tokenizer, text: str) -> list[Request]:
    return [
        Request(
            random_image(3),
            f"What is {text} here?",
            caption=f"A chart {text}",
            ocr=text,
        ),
        Request(
            question=f"Why {text}?",
            full_context=f"Facts: {text}",
            compressed_context=text,
        ),
    ]


def control_ids(tokenizer, ids: list[int]) -> Counter:
    added = set(tokenizer.added_tokens_decoder)
    return Counter(i for i in ids if i in added)


def expanded(prompt: str, n: int) -> str:
    """A prompt string with the template's image placeholder (the first) repeated n times, as in the ids."""
    return prompt.replace("<|image_pad|>", "<|image_pad|>" * n, 1)


def test_special_token_strings_in_user_text_are_ordinary_text(pair):
    tok = pair.tokenizer
    hostile = every_added_token(tok)
    for bad, clean in zip(
        hostile_requests(tok, hostile), hostile_requests(tok, "plain words")
    ):
        got = encode_request(bad, pair.processor, tok)
        ref = encode_request(clean, pair.processor, tok)
        for view in ("full", "comp", "question"):
            ids = getattr(got, view).ids
            # the same control tokens as with harmless text: only the template's (and the image's pads)
            assert control_ids(tok, ids) == control_ids(tok, getattr(ref, view).ids), (
                view
            )
        p = got.prompts
        assert (
            tok.decode(got.comp.ids) == p.x_comp
        )  # the user's exact characters, nothing escaped
        assert hostile in p.x_comp and hostile in p.x_full
        if bad.image is None:
            assert tok.decode(got.full.ids) == p.x_full
            continue
        n = got.full.ids.count(tok.convert_tokens_to_ids("<|image_pad|>"))
        assert tok.decode(got.full.ids) == expanded(p.x_full, n)
        assert tok.decode(got.question.ids) == expanded(p.x_question, n)


def test_ordinary_text_gives_the_ids_of_the_whole_prompt(pair):
    """Tokenizing template pieces and user text apart changes nothing for text without special-token strings:
    the ids and image inputs equal the tokenizer's / processor's on the whole prompt string."""
    tok, proc = pair.tokenizer, pair.processor
    reqs = [random_request(s) for s in range(8)]
    reqs += [
        Request(
            random_image(1),
            "  How many? \n",
            caption="\nline one\n\nline two ",
            ocr=" 12  30\t21 ",
        ),
        Request(
            question="What is the answer?",
            full_context="The answer is 42.",
            compressed_context="a table",
        ),
    ]
    for r in reqs:
        enc = encode_request(r, proc, tok)
        assert (
            enc.comp.ids
            == tok(enc.prompts.x_comp, add_special_tokens=False)["input_ids"]
        )
        if r.image is None:
            assert (
                enc.full.ids
                == tok(enc.prompts.x_full, add_special_tokens=False)["input_ids"]
            )
            continue
        for view, prompt in (
            (enc.full, enc.prompts.x_full),
            (enc.question, enc.prompts.x_question),
        ):
            whole = proc(
                text=[prompt],
                images=[r.image],
                return_tensors="pt",
                add_special_tokens=False,
            )
            assert view.ids == whole["input_ids"][0].tolist()
            assert view.pixel_values.equal(whole["pixel_values"])
            assert view.image_grid_thw.equal(whole["image_grid_thw"])


@pytest.mark.parametrize("method", ["asymspec", "floor", "drafter", "sd", "scd"])
def test_every_method_decodes_a_request_full_of_special_token_strings(tiny_vl, method):
    from asymspec_vl import AsymSpecConfig

    text = every_added_token(tiny_vl.pair.tokenizer)
    for r in hostile_requests(tiny_vl.pair.tokenizer, text):
        res = tiny_vl.generate_batch([r], method, AsymSpecConfig(**CFG))[0]
        assert res.finish_reason in ("stop", "length") and len(res.token_ids) >= 1
