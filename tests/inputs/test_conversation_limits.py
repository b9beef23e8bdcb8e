"""A conversation's image count and captions at their edges in the library (asymspec_vl/inputs/conversation.py,
issue 33): more images than one request holds is a TooManyImagesError naming the limit, raised before any image
is loaded, on generate_chat too; a caption that names a file is text, never opened; a message's `name` is accepted
and changes no prompt."""

import pytest
from serve_support import EXAMPLES
from transformers import AutoProcessor, AutoTokenizer

from asymspec_vl import AsymSpecVL, Conversation, TooManyImagesError
from asymspec_vl.core.errors import AsymSpecError, InputError
from asymspec_vl.core.limits import LIMITS
from asymspec_vl.inputs import conversation
from asymspec_vl.pair.defaults import embedded_models

IMAGE = str(EXAMPLES / "toy-read.png")


@pytest.fixture(scope="module")
def models():
    return AutoProcessor.from_pretrained(
        embedded_models()["drafter"]
    ), AutoTokenizer.from_pretrained(embedded_models()["verifier"])


def chat(n_images: int, **part) -> list:
    images = [{"type": "image", "image": IMAGE, **part} for _ in range(n_images)]
    return [
        {"role": "user", "content": images + [{"type": "text", "text": "How many?"}]}
    ]


def test_more_images_than_a_request_holds_are_refused_before_any_loads(
    models, monkeypatch
):
    loaded = []
    monkeypatch.setattr(
        conversation, "load_image", lambda image, **k: loaded.append(image)
    )
    with pytest.raises(
        TooManyImagesError,
        match=f"64 images; a request holds at most {LIMITS.images_per_request}",
    ):
        conversation.encode(Conversation(chat(64)), *models)
    assert loaded == []
    split = (
        chat(3) + [{"role": "assistant", "content": "3"}] + chat(2)
    )  # counted over all the turns
    with pytest.raises(TooManyImagesError, match="5 images"):
        conversation.encode(Conversation(split), *models)


def test_a_request_at_the_limit_is_served(models):
    enc = conversation.encode(Conversation(chat(LIMITS.images_per_request)), *models)
    assert len(enc.meta["image_sizes"]) == LIMITS.images_per_request


def test_generate_chat_raises_the_typed_error():
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    with pytest.raises(TooManyImagesError) as e:
        vl.generate_chat(chat(64), max_new_tokens=2)
    assert isinstance(e.value, InputError) and isinstance(e.value, AsymSpecError)


def test_a_caption_naming_a_file_is_text(models):
    enc = conversation.encode(
        Conversation(chat(1, caption=IMAGE, ocr="README.md")), *models
    )
    assert f"{IMAGE}" in enc.prompts.x_comp and "README.md" in enc.prompts.x_comp


def test_a_name_on_a_message_changes_no_prompt(models):
    named = chat(1)
    named[0]["name"] = "alice"
    assert (
        conversation.encode(Conversation(named), *models).prompts
        == conversation.encode(Conversation(chat(1)), *models).prompts
    )


def test_several_images_views_are_numbered_from_one(models):
    """Image n of a turn is "Image n" in the verifier's view (x_comp), counting from 1 as a reader does."""
    parts = [
        {"type": "image", "image": IMAGE, "caption": "a red square", "ocr": "7"},
        {"type": "image", "image": IMAGE, "caption": "a blue circle", "ocr": "9"},
        {"type": "text", "text": "Add the numbers."},
    ]
    x_comp = conversation.encode(
        Conversation([{"role": "user", "content": parts}]), *models
    ).prompts.x_comp
    for block in (
        "Image 1 description:\na red square",
        "Text in image 1 (OCR):\n7",
        "Image 2 description:\na blue circle",
        "Text in image 2 (OCR):\n9",
    ):
        assert block in x_comp
    assert "Image 0" not in x_comp and "image 0" not in x_comp
