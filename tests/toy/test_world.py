"""The toy world: reproducible scenes and images, captions that never give the digits away, answers that
are right and parse, training and held-out streams apart, and training rows built like inference prompts."""

import re

import numpy as np
import pytest

from asymspec_vl.toy import world
from asymspec_vl.toy.draw import CELL, COLOURS, SHAPES


def test_examples_and_images_are_reproducible():
    a, b = world.heldout(12), world.heldout(12)
    assert [(e.uid, e.items, e.question, e.answer) for e in a] == [
        (e.uid, e.items, e.question, e.answer) for e in b
    ]
    assert all(
        np.array_equal(np.asarray(x.image()), np.asarray(y.image()))
        for x, y in zip(a, b)
    )
    assert a[0].image().size == (CELL * world.NUM_ITEMS, CELL)
    assert len({e.image().tobytes() for e in a}) == len(
        a
    )  # every scene looks different


def test_heldout_is_balanced_over_question_types():
    ex = world.heldout(30)
    assert [e.qtype for e in ex[:3]] == list(world.QTYPES)
    assert {q: sum(e.qtype == q for e in ex) for q in world.QTYPES} == {
        q: 10 for q in world.QTYPES
    }


def test_caption_names_every_shape_but_no_digit():
    for e in world.heldout(60) + world.train_scene(0, 0, 5, ("read",) * 3):
        assert not re.search(r"\d", e.caption)
        for it in e.items:
            assert it.name in e.caption
        assert (
            len({it.colour for it in e.items})
            == len({it.shape for it in e.items})
            == world.NUM_ITEMS
        )


def test_answers_are_correct_and_parse():
    for e in world.heldout(90):
        assert world.extract_answer(e.answer) == e.target and world.is_correct(
            e.answer, e
        )
        named = [it for it in e.items if it.name in e.question]
        digits = [int(d) for d in re.findall(r"\d+", e.answer.split(".")[0])]
        if e.qtype == "read":
            assert e.target == named[0].digit and e.answer.startswith(
                f"{named[0].digit}."
            )
        elif e.qtype == "sum":
            assert e.target == digits[0] + digits[1] == sum(it.digit for it in named)
        else:
            m = int(re.findall(r"\d+", e.question)[-1])
            assert (
                m in world.MULTIPLIERS
                and e.target == named[0].digit * m == digits[0] * digits[1]
            )
        assert e.answer.split(" ")[0].rstrip(".") == str(
            digits[0]
        )  # the first answer token is a digit read off the image


def test_extract_answer():
    assert world.extract_answer("7 × 12 = 84. The answer is 84.") == 84
    assert world.extract_answer("The answer is 3. The answer is 5.") == 5
    assert world.extract_answer("no number here") is None
    assert world.extract_answer("the answer is -4") == -4


def test_curriculum_is_right_arithmetic():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        question, answer = world.arithmetic_example(rng)
        x, y = (int(v) for v in re.findall(r"\d+", question))
        op = "×" if ("times" in question or "Multiply" in question) else "+"
        seen.add(op)
        assert world.extract_answer(answer) == (x * y if op == "×" else x + y)
        assert answer.startswith(f"{x} {op} {y} = ")
    assert seen == {"×", "+"}


def test_training_and_heldout_streams_are_apart():
    train = world.train_scene(0, 0, 0, ("read",))[0]
    held = world.heldout(1)[0]
    assert train.entropy[0] == world.TRAIN and held.entropy[0] == world.HELDOUT
    assert (
        world.train_scene(1, 0, 0, ("read",))[0].items
        != world.train_scene(0, 0, 0, ("read",))[0].items
        or world.train_scene(1, 0, 0, ("read",))[0].image().tobytes()
        != train.image().tobytes()
    )
    with pytest.raises(ValueError):
        world.ask(train.items, "count", np.random.default_rng(0))


def test_digits_are_drawn_differently():
    """The ten seven-segment digits are ten different images on the same shape and background."""
    images = set()
    for d in range(10):
        items = tuple(
            world.Item(c, s, d) for c, s in zip(list(COLOURS)[:3], SHAPES[:3])
        )
        images.add(world.render_scene(items, 5).tobytes())
    assert len(images) == 10


@pytest.fixture(scope="module")
def toy_processor(tmp_path_factory):
    """A processor with the toy tokenizer (Qwen digit split), as `toy train` writes it."""
    from transformers import AutoProcessor

    from asymspec_vl.toy.tiny import train_tokenizer, write_vl_model
    from asymspec_vl.toy.train import DRAFTER_SIZES

    tok = train_tokenizer(world.tokenizer_corpus(), vocab_size=512, qwen_split=True)
    return AutoProcessor.from_pretrained(
        write_vl_model(tmp_path_factory.mktemp("toy-proc"), tok, DRAFTER_SIZES)
    )


def test_numbers_are_digit_tokens(toy_processor):
    tok = toy_processor.tokenizer
    ids = tok("7 × 85 = 595.", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in ids[:1] + ids[3:5]] == ["7", "8", "5"]


def test_training_rows_match_the_processor(toy_processor):
    """Drafter rows are token-for-token what the Qwen3-VL processor builds for the same prompt and image,
    followed by the answer and <|im_end|>; only the answer is a target; tags name the right digits."""
    from asymspec_vl.toy.batches import Encoder, drafter_batch, verifier_batch

    processor = toy_processor
    enc = Encoder(processor.tokenizer, processor)
    ex = world.heldout(2)[1]
    views = enc.views(ex)
    pixels, grid = enc.image(ex.image())
    for view in ("full", "question"):
        ref = processor(
            text=[views[view]],
            images=[ex.image()],
            return_tensors="pt",
            add_special_tokens=False,
        )
        assert enc.prompt_ids(views[view], grid) == ref["input_ids"][0].tolist()
        assert np.array_equal(pixels.numpy(), ref["pixel_values"].numpy())
    ids, labels = enc.row(enc.prompt_ids(views["comp"]), ex.answer)
    answer = [t for t in labels if t != -100]
    assert (
        processor.tokenizer.decode(answer) == ex.answer + "<|im_end|>"
        and ids[-len(answer) :] == answer
    )
    b = drafter_batch(enc, 0, 3, 8, 4, (0.5, 0.5, 0.0), (1 / 3, 1 / 3, 1 / 3))
    n_pad = int((b.input_ids == enc.image_token_id).sum())
    assert (
        b.pixel_values is not None
        and n_pad == int(b.image_grid_thw.prod(-1).sum()) // 4
    )
    assert (
        b.tags is not None and len(b.tags) >= 8
    )  # at least one shape named per question
    for row, pos, digit in b.tags.tolist():
        assert (
            enc.words[int(b.input_ids[row, pos])]
            and 0 <= digit <= 9
            and b.labels[row, pos] == -100
        )
    v = verifier_batch(Encoder(processor.tokenizer), 0, 3, 8, 4, 0.5)
    assert v.pixel_values is None and (v.labels != -100).any(dim=1).all()


def test_tags_give_each_named_shape_its_digit(toy_processor):
    from asymspec_vl.toy.batches import Encoder
    from asymspec_vl.toy.tags import tag_targets

    enc = Encoder(toy_processor.tokenizer, toy_processor)
    ex = world.heldout(
        1
    )[
        0
    ]  # a read question: the caption names 3 shapes, the question 1 (colour + shape each)
    prompt = enc.prompt_ids(enc.views(ex)["full"], enc.image(ex.image())[1])
    tags = tag_targets(prompt, len(prompt), enc.words, ex.items, 5)
    assert len(tags) == 8
    for row, pos, digit in tags:
        word = enc.words[prompt[pos]]
        assert row == 5 and digit == next(
            it.digit for it in ex.items if word in (it.colour, it.shape)
        )
