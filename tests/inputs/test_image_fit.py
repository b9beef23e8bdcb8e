"""A large image is decoded near the size the drafter's processor uses (asymspec_vl/inputs/image_fit.py): the size
rule is the processor's own, a PNG zlib bomb reaches the processor reduced, a large JPEG decodes at a DCT scale,
the drafter still gets the image tokens the full image gives, and images up to REDUCE_PIXELS are untouched."""

import io

import pytest
from PIL import Image, JpegImagePlugin
from serve_support import EXAMPLES
from transformers import AutoProcessor

from asymspec_vl import Conversation, Request
from asymspec_vl.inputs import conversation, image_fit
from asymspec_vl.inputs.images import load_image
from asymspec_vl.inputs.prompts import encode_request, vision_inputs
from asymspec_vl.pair.defaults import embedded_models


@pytest.fixture(scope="module")
def processor():
    return AutoProcessor.from_pretrained(embedded_models()["drafter"])


@pytest.fixture(scope="module")
def fit(processor):
    return image_fit.processor_fit(processor)


def encoded(image: Image.Image, fmt: str, **save) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **save)
    return buf.getvalue()


def stripes(w: int, h: int) -> Image.Image:
    """An image with detail at every scale (a flat one would hide a wrong reduction)."""
    return Image.linear_gradient("L").resize((w, h)).convert("RGB")


@pytest.mark.parametrize("size", [(7900, 7900), (256, 192), (3000, 700), (96, 32)])
def test_the_fit_is_the_processors_own_size(processor, fit, size):
    """fit(size) is the size the processor resizes an image of that size to: its grid x patch size."""
    _, grid = vision_inputs(processor, [Image.new("RGB", size)])
    patch = processor.image_processor.patch_size
    t, h, w = grid[0].tolist()
    assert fit(size) == (w * patch, h * patch)


def test_a_png_zlib_bomb_reaches_the_processor_reduced_with_the_same_image_tokens(
    processor, fit
):
    """A 7,900 x 7,900 black PNG (~180 KB) is box-reduced by the largest factor keeping it at least the processor's
    128 x 128; the drafter's grid is the one the full-size image gives."""
    data = encoded(Image.new("RGB", (7900, 7900)), "PNG", optimize=True)
    assert len(data) < 200_000
    full, small = load_image(data), load_image(data, fit=fit)
    assert full.size == (7900, 7900)
    assert (
        small.size == (130, 130) and small.mode == "RGB"
    )  # 7900 // 128 = 61; ceil(7900 / 61) = 130
    assert image_fit.reduction(full.size, fit) == 61
    assert (
        vision_inputs(processor, [small])[1].tolist()
        == vision_inputs(processor, [full])[1].tolist()
    )


def test_a_large_jpeg_is_decoded_at_a_dct_scale(fit, monkeypatch):
    """A 4000 x 3000 JPEG decodes at 1/8 scale (500 x 375, still over the processor's 128 x 96): Pillow's draft
    is asked for the processor's size before any pixel loads."""
    data = encoded(stripes(4000, 3000), "JPEG", quality=80)
    drafts = []
    real = JpegImagePlugin.JpegImageFile.draft
    monkeypatch.setattr(
        JpegImagePlugin.JpegImageFile,
        "draft",
        lambda im, mode, size: drafts.append(size) or real(im, mode, size),
    )
    img = load_image(data, fit=fit)
    assert drafts == [(128, 96)] and img.size == (500, 375)
    assert load_image(data).size == (
        4000,
        3000,
    )  # without the processor's rule: full size


def test_small_images_are_untouched_bit_for_bit(fit):
    """Up to REDUCE_PIXELS an image reaches the processor as before, even when the processor shrinks it."""
    for path in (EXAMPLES / "chart.png", EXAMPLES / "toy-read.png"):
        assert load_image(path, fit=fit).tobytes() == load_image(path).tobytes()
    side = int(image_fit.REDUCE_PIXELS**0.5)
    edge = stripes(side, side)
    assert load_image(edge, fit=fit).tobytes() == edge.tobytes()
    assert image_fit.reduction((side + 1, side + 1), fit) > 1


def test_the_exif_orientation_is_applied_to_the_reduced_image(fit):
    """An EXIF-rotated large image comes back upright (its sides swapped) and reduced."""
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 270 to view
    data = encoded(stripes(3000, 1500), "PNG", exif=exif)
    assert load_image(data).size == (1500, 3000)
    img = load_image(data, fit=fit)
    assert img.size[0] < img.size[1] and img.size[0] * img.size[1] < 1500 * 3000 // 4


def test_a_palette_or_transparent_image_is_reduced_after_its_rgb_conversion(fit):
    """Box-averaging palette indices or a transparent colour would be wrong: those are reduced in RGB."""
    pal = stripes(2500, 2000).convert("P")
    assert image_fit.reduced(pal, fit) is pal
    assert (
        load_image(encoded(pal, "PNG"), fit=fit).size
        == load_image(encoded(stripes(2500, 2000), "PNG"), fit=fit).size
    )


def test_library_and_conversation_load_through_the_processors_rule(
    processor, monkeypatch
):
    """encode_request and a conversation's images load with the drafter processor's rule (the server's decode
    passes the same rule), so the library and the server read a large image alike."""
    seen = []
    real = load_image

    def spy(image, *a, fit=None, **k):
        seen.append(fit is not None and fit((7900, 7900)))
        return real(image, *a, fit=fit, **k)

    from asymspec_vl.inputs import prompts

    monkeypatch.setattr(prompts, "load_image", spy)
    monkeypatch.setattr(conversation, "load_image", spy)
    image = str(EXAMPLES / "toy-read.png")
    encode_request(Request(image, "Which number?"), processor, processor.tokenizer)
    conversation.encode(
        Conversation(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": image},
                        {"type": "text", "text": "Which?"},
                    ],
                }
            ]
        ),
        processor,
        processor.tokenizer,
    )
    assert seen == [(128, 128), (128, 128)]


def test_a_processor_without_the_size_rule_reduces_nothing():
    assert image_fit.processor_fit(object()) is None
    assert image_fit.reduction((9000, 9000), None) == 1


def test_results_report_the_size_the_image_had_before_it_was_reduced(processor, fit):
    """meta's image size (library and conversation) is the image's own, upright, not the reduced copy's."""
    png = encoded(Image.new("RGB", (4000, 2000)), "PNG")
    exif = Image.Exif()
    exif[0x0112] = 6  # a quarter turn
    jpeg = encoded(stripes(4000, 3000), "JPEG", exif=exif)
    for data, want in ((png, (4000, 2000)), (jpeg, (3000, 4000))):
        img = load_image(data, fit=fit)
        assert (
            img.size[0] * img.size[1] < want[0] * want[1] // 4
            and image_fit.original_size(img) == want
        )
        again = load_image(
            img, fit=fit
        )  # the server's decoded image, loaded again by the conversation
        assert image_fit.original_size(again) == want
        enc = conversation.encode(
            Conversation(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "image": data},
                            {"type": "text", "text": "Which?"},
                        ],
                    }
                ]
            ),
            processor,
            processor.tokenizer,
        )
        assert enc.meta["image_sizes"] == [want]
    small = load_image(EXAMPLES / "toy-read.png", fit=fit)
    assert image_fit.original_size(small) == small.size == (96, 32)
    from asymspec_vl.serve.notes import answer_warnings

    assert (
        "no toy scene (4000x2000)"
        in answer_warnings(True, [load_image(png, fit=fit)])[0]
    )  # the server's note
