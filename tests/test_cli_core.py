"""`asymspec-vl tiny-models` writes loadable offline folders; `generate` answers and reports errors cleanly."""

import json
import os
import subprocess
import sys

import pytest
from helpers import random_image

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "asymspec_vl.cli", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
        **kw,
    )


def test_tiny_models_command_writes_loadable_folders(tmp_path):
    out = cli("tiny-models", str(tmp_path / "m"))
    assert out.returncode == 0, out.stderr
    from transformers import (
        AutoModelForCausalLM,
        AutoProcessor,
        AutoTokenizer,
        Qwen3VLForConditionalGeneration,
    )

    for f in [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ]:
        assert (tmp_path / "m" / "vl_drafter" / f).is_file(), f
    proc = AutoProcessor.from_pretrained(tmp_path / "m" / "vl_drafter")
    assert type(proc).__name__ == "Qwen3VLProcessor"
    assert (
        type(
            Qwen3VLForConditionalGeneration.from_pretrained(
                tmp_path / "m" / "vl_drafter"
            )
        ).__name__
        == "Qwen3VLForConditionalGeneration"
    )
    tok = AutoTokenizer.from_pretrained(tmp_path / "m" / "verifier")
    assert tok.get_vocab() == proc.tokenizer.get_vocab()
    for name in [
        "<|im_start|>",
        "<|im_end|>",
        "<|image_pad|>",
        "<|vision_start|>",
        "<|endoftext|>",
    ]:
        assert name in tok.get_vocab()
    assert (
        AutoModelForCausalLM.from_pretrained(
            tmp_path / "m" / "text_drafter"
        ).config.num_hidden_layers
        == 1
    )


def test_generate_command(tiny_models, tmp_path):
    image = tmp_path / "img.png"
    random_image(3).save(image)
    out = cli(
        "generate",
        "--image",
        str(image),
        "--question",
        "What is shown?",
        "--caption",
        "a chart",
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
        "--methods",
        "floor,asymspec",
        "--max-new-tokens",
        "5",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["method"] for r in rows] == ["floor", "asymspec"]
    assert all(len(r["token_ids"]) == 5 and r["stats"]["emitted"] == 5 for r in rows)
    bad = cli(
        "generate",
        "--image",
        str(tmp_path / "none.png"),
        "--question",
        "What?",
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
    )
    assert (
        bad.returncode == 2
        and "image file not found" in bad.stderr
        and "Traceback" not in bad.stderr
    )
    bad = cli(
        "generate",
        "--image",
        str(image),
        "--question",
        "What?",
        "-K",
        "0",
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
    )
    assert (
        bad.returncode == 2
        and "-K 0 is invalid" in bad.stderr
        and "AsymSpecConfig" not in bad.stderr
    )


def test_generate_samples_with_temperature_top_p_and_seed(
    tiny_models, tiny_vl, tmp_path, capsys
):
    """--temperature / --top-p / --seed reach AsymSpecConfig: the seeded answer is the Python API's with that
    config (and no greedy one); a bad value is the typed error naming its flag."""
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.cli import main

    image = tmp_path / "img.png"
    random_image(3).save(image)
    models = [
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
    ]
    ask = [
        "generate",
        "--image",
        str(image),
        "--question",
        "What is shown?",
        "--caption",
        "a chart",
        *models,
        "--max-new-tokens",
        "6",
        "--json",
    ]
    capsys.readouterr()
    assert main([*ask, "--temperature", "1.5", "--top-p", "0.9", "--seed", "3"]) == 0
    row = json.loads(capsys.readouterr().out)
    cfg = AsymSpecConfig(max_new_tokens=6, temperature=1.5, top_p=0.9, seed=3)
    ref = tiny_vl.generate(str(image), "What is shown?", caption="a chart", config=cfg)
    greedy = tiny_vl.generate(
        str(image),
        "What is shown?",
        caption="a chart",
        config=cfg.replace(temperature=0.0),
    )
    assert row["token_ids"] == ref.token_ids != greedy.token_ids
    assert {k: row["config"][k] for k in ("temperature", "top_p", "seed")} == {
        "temperature": 1.5,
        "top_p": 0.9,
        "seed": 3,
    }
    for flag, value, says in (
        (
            "--temperature",
            "-1",
            "--temperature -1.0 is invalid: expected a number in [0, 100]",
        ),
        ("--top-p", "0", "--top-p 0.0 is invalid: expected a number in (0, 1]"),
    ):
        assert main([*ask, flag, value]) == 2
        err = capsys.readouterr().err
        assert says in err and "AsymSpecConfig" not in err and "Traceback" not in err


def test_a_missing_image_fails_before_any_model_loads(tmp_path, monkeypatch, capsys):
    from asymspec_vl import commands
    from asymspec_vl.cli import main

    monkeypatch.setattr(
        commands,
        "load_from_args",
        lambda args: (_ for _ in ()).throw(AssertionError("loaded")),
    )
    code = main(
        ["generate", "--image", str(tmp_path / "none.png"), "--question", "What?"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "image file not found" in err and "no --caption" not in err


@pytest.mark.vllm
def test_generate_on_the_vllm_backend_prints_only_its_json_on_stdout(
    tiny_models, tmp_path
):
    """vLLM's log and torch.distributed's [Gloo] lines go to stderr: stdout is one JSON document per method."""
    image = tmp_path / "img.png"
    random_image(3).save(image)
    out = cli(
        "generate",
        "--image",
        str(image),
        "--question",
        "What is shown?",
        "--caption",
        "a chart",
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
        "--backend",
        "vllm",
        "--methods",
        "asymspec",
        "--max-new-tokens",
        "4",
        "--json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["method"] == "asymspec", out.stdout[
        :2000
    ]
    assert "INFO" in out.stderr  # vLLM's log went somewhere: stderr
