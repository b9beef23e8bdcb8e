"""The server's per-image extras and image count at their edges (asymspec_vl/serve/translate.py, issue 33): 64
images are a 400 TooManyImagesError naming --max-images (the library's error class too); caption / ocr "" is
"none" for every image and nothing for a text-only conversation (as the docs' client example sends it); one
non-empty string for several images, or one without any image, is a 400 naming the field; a message's `name`
(OpenAI's participant name) is accepted and read by no model."""

import pytest
from serve_support import EXAMPLES, chat_body, data_url

from asymspec_vl.core import errors as core_errors
from asymspec_vl.serve.http_errors import (
    TooManyImagesError,
    UnsupportedRequestError,
    error_body,
    status_of,
)

URL = data_url((EXAMPLES / "toy-read.png").read_bytes())


def job(body: dict, **kw):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from asymspec_vl.serve.settings import ServeSettings
    from asymspec_vl.serve.translate import translate

    return translate(
        ChatCompletionRequest.model_validate(body),
        ServeSettings("embedded", "embedded", **kw),
    )


def text_only(**fields) -> dict:
    return {"messages": [{"role": "user", "content": "What is 9 times 14?"}], **fields}


def test_64_images_are_a_400_naming_the_limit():
    with pytest.raises(TooManyImagesError) as caught:
        job(chat_body("How many?", [URL] * 64))
    e = caught.value
    assert isinstance(e, core_errors.TooManyImagesError) and isinstance(
        e, core_errors.AsymSpecError
    )
    assert (
        status_of(e) == 400
        and "64 images" in str(e)
        and "at most 4" in str(e)
        and "--max-images" in str(e)
    )
    assert (
        error_body(e)["error"]["type"] == "TooManyImagesError"
        and error_body(e)["error"]["param"] == "messages"
    )


@pytest.mark.parametrize("field", ["caption", "ocr"])
def test_an_empty_string_in_a_text_only_conversation_is_nothing(field):
    assert job(text_only(**{field: ""})).captions == ()
    assert job(text_only(caption="", ocr="")).ocrs == ()
    assert job(text_only(**{field: []})).captions == ()
    with pytest.raises(
        UnsupportedRequestError,
        match=f"{field} is given but the conversation holds no image",
    ) as e:
        job(text_only(**{field: "a red square"}))
    assert e.value.param == field


def test_an_empty_string_for_several_images_is_none_for_each():
    j = job(chat_body("Sum?", [URL] * 4, caption="", ocr=""))
    assert j.captions == ("",) * 4 and j.ocrs == ("",) * 4


def test_one_string_for_several_images_is_refused_by_name():
    with pytest.raises(
        UnsupportedRequestError,
        match="ocr is one string for 4 images: which image it describes is unknown",
    ) as e:
        job(chat_body("Sum?", [URL] * 4, ocr="14"))
    assert e.value.param == "ocr"
    assert job(chat_body("Sum?", [URL] * 4, ocr=["14", "", None, ""])).ocrs == (
        "14",
        "",
        None,
        "",
    )
    assert job(chat_body("Sum?", URL, ocr="14")).ocrs == (
        "14",
    )  # one string for one image, as before


def test_a_name_on_messages_is_accepted_and_read_by_no_model():
    named = chat_body("Which number?", URL)
    named["messages"][0]["name"] = "alice"
    assert job(named).turns == job(chat_body("Which number?", URL)).turns
