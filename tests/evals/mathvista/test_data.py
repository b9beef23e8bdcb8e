"""MathVista data offline: the vendored text data, the paper's selection (587), the requests the models read,
and images from a local folder (files, official layout, parquet) with clear errors when they are missing.
The images here are STAND-INS rendered locally (the real ones cannot be downloaded offline)."""

import re

import pytest
from asymspec_vl.captioners import PrecomputedCaptioner
from asymspec_vl.evals.mathvista.data import (
    DATA_DIR,
    data_files,
    data_hashes,
    load_problems,
)
from asymspec_vl.evals.mathvista.image_source import (
    FolderImages,
    MissingImagesError,
    TableImages,
    open_images,
)
from asymspec_vl.evals.mathvista.protocol import (
    COT_SUFFIX,
    TASKS,
    EvalProtocol,
    build_request,
    parse_tasks,
    question_text,
    select,
)
from asymspec_vl.evals.mathvista.run import load_setup
from PIL import Image, ImageDraw

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.inputs.prompts import build_prompts


def render_standins(folder, pids, suffix=".png"):
    """Write one labelled stand-in image per pid as <folder>/<pid><suffix> (NOT the real MathVista image)."""
    folder.mkdir(parents=True, exist_ok=True)
    for pid in pids:
        n = int(pid) if str(pid).isdigit() else 7
        img = Image.new("RGB", (224, 160), (245, 245, 240))
        draw = ImageDraw.Draw(img)
        draw.text((6, 6), f"STAND-IN for MathVista pid {pid}", fill="black")
        draw.text((6, 20), "(not the real image)", fill="gray")
        draw.rectangle(
            [20, 50, 40 + (n * 37) % 150, 140], outline=(40, 90, 200), width=3
        )
        draw.ellipse([150, 60, 150 + n % 50 + 10, 120], outline=(200, 60, 40), width=3)
        img.save(folder / f"{pid}{suffix}")


@pytest.fixture(scope="module")
def problems():
    return load_problems()


@pytest.fixture(scope="module")
def official():
    return PrecomputedCaptioner.from_json(
        data_files()["captions"], data_files()["ocrs"]
    )


def test_vendored_text_data_is_complete_and_attributed(problems):
    readme = (DATA_DIR / "README.md").read_text()
    for name, digest in data_hashes().items():
        assert re.search(rf"{digest}\s+{re.escape(name)}", readme), name
    assert (
        "CC BY-SA 4.0" in readme
        and "Lu" in readme
        and (DATA_DIR / "LICENSE")
        .read_text()
        .startswith("Attribution-ShareAlike 4.0 International")
    )
    assert len(problems) == 1000 and list(problems)[:3] == ["1", "2", "3"]
    assert not list(DATA_DIR.glob("*.jpg")) and not list(
        DATA_DIR.glob("*.png")
    )  # no images shipped
    counts = {}
    for p in problems.values():
        counts[p.task] = counts.get(p.task, 0) + 1
    assert counts == {
        "figure question answering": 269,
        "geometry problem solving": 208,
        "math word problem": 186,
        "visual question answering": 179,
        "textbook question answering": 158,
    }


def test_the_paper_selection_is_587_problems(problems, official):
    sel = select(problems, EvalProtocol(), official.has_caption)
    assert len(sel) == 587
    by_task = {
        t: sum(1 for p in sel if p.task == TASKS[t]) for t in ("GPS", "VQA", "FQA")
    }
    assert by_task == {"GPS": 208, "VQA": 110, "FQA": 269}
    assert all(official.has_caption(p.pid) for p in sel)
    full = select(
        problems,
        EvalProtocol(tasks=parse_tasks("all"), require_caption=False),
        official.has_caption,
    )
    assert len(full) == 1000
    assert [
        p.pid for p in select(problems, EvalProtocol(), official.has_caption, limit=3)
    ] == ["2", "3", "5"]
    only = select(
        problems, EvalProtocol(tasks=("GPS",)), official.has_caption, pids=["3", "5"]
    )
    assert [p.pid for p in only] == ["3", "5"]
    with pytest.raises(ConfigError, match="not in the selection"):
        select(problems, EvalProtocol(), official.has_caption, pids=["1"])  # TQA
    with pytest.raises(ConfigError, match="--limit"):
        select(problems, EvalProtocol(), official.has_caption, limit=0)


def test_parse_tasks():
    assert parse_tasks("gps, FQA") == ("GPS", "FQA")
    assert parse_tasks("geometry problem solving,VQA,GPS") == ("GPS", "VQA")
    assert parse_tasks("all") == ("GPS", "VQA", "FQA", "MWP", "TQA")
    with pytest.raises(ConfigError, match="unknown MathVista task"):
        parse_tasks("GPS,chess")
    with pytest.raises(ConfigError):
        EvalProtocol(tasks=("XYZ",))
    with pytest.raises(ConfigError, match="caption_chars"):
        EvalProtocol(caption_chars=-1)


def test_requests_follow_the_protocol(problems, official, tiny_vl):
    p = problems["2"]
    assert question_text(p, EvalProtocol()) == p.query.strip() + "\n" + COT_SUFFIX
    assert COT_SUFFIX == "Let's think step by step, then give the final answer."
    long_caption = next(
        q
        for q in problems.values()
        if official.has_caption(q.pid)
        and len(official.describe(key=q.pid).caption.strip()) > 1600
        and len(official.describe(key=q.pid).ocr) > 800
    )
    image = Image.new("RGB", (64, 64))
    req = build_request(long_caption, "asymspec", image, official, EvalProtocol())
    full = official.describe(key=long_caption.pid)
    question = question_text(long_caption, EvalProtocol())
    caption, ocr = full.caption.strip()[:1600], full.ocr.strip()[:800]
    assert len(caption) == 1600 and len(ocr) == 800
    view = f"Image description:\n{caption}\n\nText in the image (OCR):\n{ocr}\n\n{question}"
    assert (req.question, req.image) == (view, image)
    prompts = build_prompts(req, tiny_vl.pair.processor, tiny_vl.pair.tokenizer)
    assert (
        view in prompts.x_comp
        and view in prompts.x_full
        and "<|image_pad|>" in prompts.x_full
    )
    alone = build_prompts(
        build_request(long_caption, "drafter", image, official, EvalProtocol()),
        tiny_vl.pair.processor,
        tiny_vl.pair.tokenizer,
    )
    assert (
        caption not in alone.x_question and question in alone.x_question
    )  # drafter alone: image + question
    for method in ("floor", "sd", "scd"):  # x_comp only: the same text, no image
        text_only = build_request(long_caption, method, None, official, EvalProtocol())
        assert text_only.image is None and text_only.question == view
        assert (
            build_prompts(
                text_only, tiny_vl.pair.processor, tiny_vl.pair.tokenizer
            ).x_comp
            == prompts.x_comp
        )
    short = build_request(
        p,
        "floor",
        None,
        official,
        EvalProtocol(caption_chars=10, ocr_chars=0, cot_suffix=""),
    )
    assert (
        short.question
        == f"Image description:\n{official.describe(key='2').caption[:10].strip()}\n\n{p.query}"
    )


def test_offline_folder_of_standin_images(tmp_path, problems):
    pids = ["2", "3", "5", "6", "8"]
    render_standins(tmp_path / "mv" / "images", pids)
    records, store = open_images(tmp_path / "mv")
    assert records is None and isinstance(
        store, FolderImages
    )  # annotations: the vendored ones
    setup = load_setup(str(tmp_path / "mv"), EvalProtocol(), limit=5)
    assert [p.pid for p in setup.problems] == pids
    img = Image.open(setup.store.get(setup.problems[0]))
    assert img.size == (224, 160)
    assert setup.store.describe(setup.problems)["source"] == "folder"
    with pytest.raises(MissingImagesError) as err:
        load_setup(
            str(tmp_path / "mv"), EvalProtocol(), limit=8
        )  # pids 9, 10, 12 have no image
    msg = str(err.value)
    assert "missing for 3 of 8" in msg and "9, 10, 12" in msg
    assert "--images" in msg and "AI4Math/MathVista" in msg
    folder = tmp_path / "mv"
    assert (
        f"Put them in {folder}, then pass --images {folder}" in msg
    )  # the folder, and both layouts in it
    assert "as images/<pid>.png" in msg and "flat as <pid>.png" in msg
    render_standins(
        tmp_path / "flat", pids[:2]
    )  # the flat layout works as the message says
    flat = load_setup(str(tmp_path / "flat"), EvalProtocol(), limit=2)
    assert flat.store.get(flat.problems[1]) == tmp_path / "flat" / "3.png"
    with pytest.raises(MissingImagesError, match="image folder not found"):
        open_images(tmp_path / "nowhere")


def test_official_layout_with_local_annotations(tmp_path, problems):
    """MathVista's data release: data/testmini.json + data/images/<pid>.jpg (a JSON of records)."""
    import json

    root = tmp_path / "release"
    render_standins(root / "data" / "images", ["2", "3"], suffix=".jpg")
    raw = json.loads(data_files()["annotations"].read_text())
    (root / "data" / "testmini.json").write_text(
        json.dumps({k: raw[k] for k in ("2", "3")})
    )
    records, store = open_images(root)
    assert len(records) == 2 and isinstance(store, FolderImages)
    setup = load_setup(str(root), EvalProtocol())
    assert [p.pid for p in setup.problems] == [
        "2",
        "3",
    ]  # the local annotations define the problems
    assert setup.store.get(setup.problems[0]) == root / "data" / "images" / "2.jpg"
    assert (
        setup.problems[0].query == problems["2"].query
    )  # queries come from the vendored query.json


def test_parquet_copy_of_the_split(tmp_path, problems):
    import datasets

    raw = [
        dict(problems[pid].facts(), pid=pid, image=f"images/{pid}.jpg")
        for pid in ("2", "3", "5")
    ]
    render_standins(tmp_path / "img", ["2", "3", "5"])
    rows = {
        k: [r[k] for r in raw]
        for k in ("pid", "question", "answer", "question_type", "answer_type", "image")
    }
    rows["choices"] = [r["choices"] for r in raw]
    rows["precision"] = [
        float(r["precision"]) if r["precision"] is not None else None for r in raw
    ]
    rows["unit"] = [r["unit"] for r in raw]
    rows["metadata"] = [r["metadata"] for r in raw]
    rows["decoded_image"] = [
        str(tmp_path / "img" / f"{pid}.png") for pid in rows["pid"]
    ]
    ds = datasets.Dataset.from_dict(rows).cast_column("decoded_image", datasets.Image())
    (tmp_path / "pq" / "data").mkdir(parents=True)
    ds.to_parquet(str(tmp_path / "pq" / "data" / "testmini-00000-of-00001.parquet"))
    records, store = open_images(tmp_path / "pq")
    assert isinstance(store, TableImages) and [r["pid"] for r in records] == [
        "2",
        "3",
        "5",
    ]
    setup = load_setup(str(tmp_path / "pq"), EvalProtocol())
    assert [p.pid for p in setup.problems] == ["2", "3", "5"]
    image = setup.store.get(setup.problems[1])
    assert image.size == (224, 160)
    assert setup.problems[0].facts() == problems["2"].facts()
    assert setup.store.describe(setup.problems)["source"] == "parquet"


def test_hub_refused_offline_with_directions(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("ASYMSPEC_VL_CACHE", str(tmp_path / "cache"))
    for spec in ("hub", None):  # None: no default folder -> the hub
        with pytest.raises(MissingImagesError) as err:
            open_images(spec)
        assert "offline mode" in str(err.value) and str(
            tmp_path / "cache" / "mathvista"
        ) in str(err.value)
    render_standins(tmp_path / "cache" / "mathvista" / "images", ["2"])
    assert isinstance(
        open_images(None)[1], FolderImages
    )  # the default folder, once it exists


def test_methods_that_never_read_the_image_need_no_images(tmp_path, monkeypatch):
    """floor / sd / scd read the verifier's text only: no image store is opened or checked for them."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(
        "ASYMSPEC_VL_CACHE", str(tmp_path / "cache")
    )  # no default image folder: the hub, offline
    with pytest.raises(MissingImagesError):
        load_setup(None, EvalProtocol(), limit=3)
    setup = load_setup(None, EvalProtocol(), limit=3, needs_images=False)
    assert len(setup.problems) == 3 and setup.store is None


def test_the_missing_images_message_is_short_lines(tmp_path):
    """The message reads in a terminal: no line over 100 characters beyond the folder's name it holds."""
    with pytest.raises(MissingImagesError) as err:
        open_images(tmp_path / "nowhere")
    lines = str(err.value).splitlines()
    folder = str(tmp_path / "nowhere")
    assert len(lines) >= 5 and all(
        len(line.replace(folder, "")) <= 100 for line in lines
    ), lines
    assert f"--images {folder}" in str(err.value) and "--images hub" in lines[-1]
