"""`toy train` end to end at a micro scale: loadable model folders, a manifest and a log, and the same
weights for the same seed whether the two models train in one process or two (different for another seed).
The full recipe's figures come from evals/benchmarks/bench_toy_train.py, not from a test."""

import json

import pytest

from asymspec_vl.toy.train import ToyTrainConfig, train_pair

MICRO = ToyTrainConfig(
    vision_steps=2,
    vision_batch=4,
    drafter_steps=3,
    drafter_batch=4,
    per_scene=2,
    verifier_steps=3,
    verifier_batch=4,
    eval_n=0,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy-train")
    return {
        name: (root / name, train_pair(root / name, cfg, workers=w))
        for name, cfg, w in [
            ("one", MICRO, 1),
            ("two", MICRO, 2),
            ("seed1", ToyTrainConfig.from_dict({**MICRO.to_dict(), "seed": 1}), 1),
        ]
    }


def test_same_seed_same_weights_in_one_or_two_processes(runs):
    assert runs["one"][1]["sha256"] == runs["two"][1]["sha256"]
    assert (
        runs["seed1"][1]["sha256"]["drafter/model.safetensors"]
        != runs["one"][1]["sha256"]["drafter/model.safetensors"]
    )
    assert (
        runs["seed1"][1]["sha256"]["verifier/model.safetensors"]
        != runs["one"][1]["sha256"]["verifier/model.safetensors"]
    )


def test_manifest_and_log(runs):
    out, manifest = runs["two"]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert ToyTrainConfig.from_dict(manifest["config"]) == MICRO
    assert manifest["config"]["seed"] == 0 and manifest["times"]["workers"] == 2
    assert manifest["data"] == {
        "vision_images": 8,
        "drafter_rows": 12,
        "drafter_scenes": 6,
        "verifier_rows": 12,
    }
    for who in ("drafter", "verifier"):
        assert manifest["times"][who]["cpu_s"] > 0 and manifest["params"][who] > 100_000
    assert set(manifest["final_loss"]) == {"drafter", "verifier"}
    assert (
        manifest["machine"]["cpu"] and manifest["machine"]["platform"]
    )  # weights reproduce on one machine only
    stages = {
        json.loads(line)["stage"]
        for line in (out / "train_log.jsonl").read_text().splitlines()
    }
    assert stages == {"vision", "drafter", "verifier"}


def test_the_folders_load_and_generate(runs):
    from asymspec_vl.evals.toy.eval import request_of

    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from asymspec_vl.toy import world

    out, _ = runs["one"]
    for f in (
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "chat_template.jinja",
    ):
        assert (out / "drafter" / f).is_file()
    vl = AsymSpecVL.from_pretrained(
        drafter=str(out / "drafter"), verifier=str(out / "verifier"), device="cpu"
    )
    res = vl.generate_batch(
        [request_of(world.heldout(1)[0])], "asymspec", AsymSpecConfig(max_new_tokens=4)
    )[0]
    assert 1 <= len(res.token_ids) <= 4


def test_bad_training_settings_are_refused():
    from asymspec_vl.core.errors import ConfigError

    with pytest.raises(ConfigError):
        ToyTrainConfig(drafter_batch=6, per_scene=4)
    with pytest.raises(ConfigError):
        ToyTrainConfig(verifier_steps=0)
    with pytest.raises(ConfigError):
        ToyTrainConfig(curriculum=1.5)
    with pytest.raises(ConfigError):
        train_pair("/nonexistent-never", MICRO, workers=3)
