"""The heavy verifier (`toy heavy`): R x the embedded verifier's layers, bit-identical logits and tokens on both
backends, and bad cost ratios refused before anything is written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from asymspec_vl.evals.toy.eval import VARIANTS, request_of

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.toy import world
from asymspec_vl.toy.heavy import layer_count, write_heavy_verifier

N = 4  # held-out questions: one of each kind and a second read


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    return write_heavy_verifier(tmp_path_factory.mktemp("heavy") / "verifier-R2.5", 2.5)


def test_heavy_has_r_times_the_layers_and_zero_output_projections(heavy):
    from safetensors.torch import load_file

    from asymspec_vl.toy import pair_paths

    real = json.loads((Path(pair_paths()["verifier"]) / "config.json").read_text())[
        "num_hidden_layers"
    ]
    config = json.loads((heavy / "config.json").read_text())
    assert config["num_hidden_layers"] == round(2.5 * real)
    weights = load_file(heavy / "model.safetensors")
    last = config["num_hidden_layers"] - 1
    assert not weights[f"model.layers.{last}.self_attn.o_proj.weight"].any()
    assert not weights[f"model.layers.{last}.mlp.down_proj.weight"].any()
    assert weights[
        f"model.layers.{last}.self_attn.q_proj.weight"
    ].any()  # the extra layer's cost is real
    assert weights[
        "model.layers.0.self_attn.o_proj.weight"
    ].any()  # the verifier's own layers are untouched


def test_heavy_logits_equal_the_embedded_verifier(heavy):
    from transformers import AutoModelForCausalLM

    from asymspec_vl.toy import pair_paths

    ids = torch.tensor([[1, 5, 9, 42, 7, 3, 11]])
    logits = [
        AutoModelForCausalLM.from_pretrained(str(p), dtype=torch.float32)(ids).logits
        for p in (pair_paths()["verifier"], heavy)
    ]
    assert torch.equal(logits[0], logits[1])


@pytest.mark.parametrize(
    "cost_ratio, says",
    [
        ("fast", "must be a number"),
        ("nan", "finite"),
        ("0.5", "at least 1"),
        ("65", "at most 64"),
        ("1.1", "not a whole number of layers"),
    ],
)
def test_bad_cost_ratios_are_refused(tmp_path, cost_ratio, says):
    with pytest.raises(ConfigError, match=says):
        write_heavy_verifier(tmp_path / "out", cost_ratio)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_bad_ratio_before_writing(tmp_path):
    out = tmp_path / "heavy"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "toy",
            "heavy",
            str(out),
            "--cost-ratio",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        done.returncode == 2
        and "at least 1" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert not out.exists()


def test_layer_count_refuses_a_vision_language_source(tmp_path):
    from asymspec_vl.toy import pair_paths

    with pytest.raises(ConfigError, match="not a text-only decoder"):
        layer_count(2, pair_paths()["drafter"])


def _tokens(vl, method: str):
    v = next(v for v in VARIANTS.values() if v.method == method)
    return [
        r.token_ids
        for r in vl.generate_batch(
            [request_of(e) for e in world.heldout(N)], v.method, v.config()
        )
    ]


def test_heavy_tokens_equal_the_embedded_verifier_on_transformers(heavy):
    from asymspec_vl import AsymSpecVL

    light = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    slow = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier=str(heavy), device="cpu"
    )
    for method in ("floor", "asymspec"):
        assert _tokens(slow, method) == _tokens(light, method)


@pytest.mark.vllm
def test_heavy_tokens_equal_the_embedded_verifier_on_vllm(heavy):
    from asymspec_vl import AsymSpecVL

    hf = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", device="cpu"
    )
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier=str(heavy), backend="vllm", dtype="float32"
    )
    try:
        for method in ("floor", "asymspec"):
            assert _tokens(vl, method) == _tokens(hf, method)
    finally:
        vl.backend.close()


def test_the_source_is_not_overwritten_through_another_spelling_of_its_path(
    tmp_path, tiny_models
):
    import shutil

    source = tmp_path / "models" / "verifier"
    shutil.copytree(tiny_models["verifier"], source)
    before = {f.name: f.read_bytes() for f in source.iterdir()}
    (tmp_path / "link").symlink_to(source)
    for out in (tmp_path / "models" / ".." / "models" / "verifier", tmp_path / "link"):
        with pytest.raises(ConfigError, match="cannot be written over its source"):
            write_heavy_verifier(out, 2, verifier=source)
    assert {f.name: f.read_bytes() for f in source.iterdir()} == before


def test_cli_prints_a_command_that_runs_with_the_verifier_it_wrote(tmp_path):
    import shlex

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asymspec_vl.cli",
            "toy",
            "heavy",
            str(tmp_path / "h"),
            "--cost-ratio",
            "1.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-1500:]
    command = shlex.split(done.stdout.strip().splitlines()[-1])
    assert command[command.index("--verifier") + 1] == str(tmp_path / "h")
    command[command.index("--variants") + 1] = (
        "floor"  # one row of two questions: it runs as printed
    )
    ran = subprocess.run(
        command + ["--n", "2", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-1500:]
    assert "| Floor |" in ran.stdout
