"""The process's vocabulary maps (pair/map_cache.py): a second load of the same folders, and an engine core in the
client's process, reuse the map ModelPair.load built; a changed tokenizer or config file, or a hub name, builds anew."""

import shutil
import types

import pytest

from asymspec_vl.pair import map_cache, model_pair
from asymspec_vl.pair.model_pair import ModelPair
from vllm_patches.requests import engine_map


@pytest.fixture
def pair_dirs(tiny_models, tmp_path, monkeypatch):
    """Copies of the tiny pair's folders, an empty cache, and a count of the maps built."""
    monkeypatch.setattr(map_cache, "_maps", type(map_cache._maps)())
    built = []
    real = model_pair.build_vocab_map
    monkeypatch.setattr(
        model_pair,
        "build_vocab_map",
        lambda *a, **k: built.append(a[2:4]) or real(*a, **k),
    )
    d, v = tmp_path / "drafter", tmp_path / "verifier"
    shutil.copytree(tiny_models["vl_drafter"], d)
    shutil.copytree(tiny_models["verifier"], v)
    return str(d), str(v), built


def test_a_second_load_of_the_same_folders_reuses_the_map(pair_dirs):
    d, v, built = pair_dirs
    first, second = ModelPair.load(d, v), ModelPair.load(d, v)
    assert second.vmap is first.vmap and len(built) == 1


def test_a_changed_file_builds_the_map_anew(pair_dirs):
    from pathlib import Path

    d, v, built = pair_dirs
    first = ModelPair.load(d, v)
    config = Path(v) / "generation_config.json"
    config.write_text(config.read_text().replace("}", ', "top_k": 7}', 1))
    assert ModelPair.load(d, v).vmap is not first.vmap and len(built) == 2


def test_a_hub_name_is_never_cached():
    assert map_cache.key("Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-32B", False) is None


def test_an_engine_core_in_the_clients_process_reads_the_clients_map(
    pair_dirs, monkeypatch
):
    d, v, built = pair_dirs
    client = ModelPair.load(d, v)
    monkeypatch.setattr(
        ModelPair, "load", lambda *a, **k: pytest.fail("the worker read the folders")
    )
    spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(model=d))
    config = types.SimpleNamespace(
        speculative_config=spec,
        model_config=types.SimpleNamespace(tokenizer=v, trust_remote_code=False),
    )
    assert client.vmap.identity and engine_map.engine_vocab_map(config) is None
    assert len(built) == 1


def test_the_cache_keeps_the_latest_maps_only(monkeypatch):
    monkeypatch.setattr(map_cache, "_maps", type(map_cache._maps)())
    for i in range(map_cache.KEPT + 2):
        map_cache.remember(("k", i), f"map {i}")
    assert map_cache.recall(("k", 0)) is None
    assert map_cache.recall(("k", map_cache.KEPT + 1)) == f"map {map_cache.KEPT + 1}"
