"""The model-name policy (pair/model_names.py): which names are an embedded toy pair, and the refusal of the
embedded drafter as a captioner, before any model loads."""

import pytest

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.pair.model_names import check_captioning_model, is_embedded


def test_the_embedded_pairs_are_known_by_name_and_by_folder(tmp_path):
    for pair in ("embedded", "embedded-llama"):
        folders = embedded_models(pair)
        assert is_embedded(pair, "verifier") and is_embedded(
            folders["verifier"], "verifier"
        )
        assert is_embedded(folders["drafter"], "drafter")
    assert not is_embedded(None) and not is_embedded(str(tmp_path), "verifier")
    assert not is_embedded("Qwen/Qwen3-VL-2B-Instruct")


def test_the_embedded_drafter_is_refused_as_a_captioner_by_name_and_by_folder():
    for name in ("embedded", embedded_models()["drafter"]):
        with pytest.raises(ConfigError, match="cannot caption images.*--model"):
            check_captioning_model(name, "--model", "leave it out")
    check_captioning_model("Qwen/Qwen3-VL-2B-Instruct", "--model", "leave it out")
    check_captioning_model(None, "--model", "leave it out")
