"""AsymSpecConfig validation: every invalid field is refused with a message naming it and its range."""

import pytest

from asymspec_vl import AsymSpecConfig, ConfigError


@pytest.mark.parametrize("field, value, expected", [
    ("K", 0, "[1, 16]"), ("K", 2.5, "[1, 16]"), ("K", True, "[1, 16]"),
    ("beta", -0.1, "[0, 10]"), ("beta", float("nan"), "[0, 10]"),
    ("gamma", 0.0, "(0, 1]"), ("gamma", 1.5, "(0, 1]"),
    ("gate", "jsd", "cda"), ("delta_source", "a-b", "contrastive"), ("bonus", "draft", "verifier"),
    ("lam", -1.0, "[0, 100]"), ("max_new_tokens", 0, "[1, 1000000]"), ("scd_alpha", 0.0, "(0, 1]"),
    ("stop_token_ids", [-1], "non-negative"),
])
def test_invalid_field_is_named(field, value, expected):
    with pytest.raises(ConfigError) as e:
        AsymSpecConfig(**{field: value})
    assert f"AsymSpecConfig.{field}=" in str(e.value) and expected in str(e.value)
    assert isinstance(e.value, ValueError)


def test_defaults_and_replace():
    cfg = AsymSpecConfig()
    assert (cfg.K, cfg.beta, cfg.gamma, cfg.gate, cfg.delta_source, cfg.bonus) == \
        (2, 1.0, 0.5, "cda", "contrastive", "verifier")
    assert cfg.replace(K=4).K == 4
    with pytest.raises(ConfigError, match="unknown"):
        cfg.replace(k=4)
    with pytest.raises(ConfigError, match="gamma"):
        cfg.replace(gamma=2.0)
    assert AsymSpecConfig(stop_token_ids=[3, 4]).stop_token_ids == (3, 4)


def test_an_empty_stop_list_is_refused_and_ignore_eos_says_it():
    """Issue 22 item 11: stop_token_ids=[] silently ran every answer to the budget; ignore_eos=True says so."""
    for empty in ([], (), set()):
        with pytest.raises(ConfigError, match=r"stop_token_ids=.* expected at least one token id.*ignore_eos=True"):
            AsymSpecConfig(stop_token_ids=empty)
    with pytest.raises(ConfigError, match="ignore_eos"):
        AsymSpecConfig(ignore_eos=1)
    assert "ignore_eos" not in AsymSpecConfig().to_dict()  # the settings of earlier runs read the same
    assert AsymSpecConfig(ignore_eos=True).to_dict()["ignore_eos"] is True
    assert AsymSpecConfig(**AsymSpecConfig(ignore_eos=True).to_dict()) == AsymSpecConfig(ignore_eos=True)


def test_ignore_eos_leaves_no_stop_token_and_stop_ids_still_stop(tiny_vl):
    pair = tiny_vl.pair
    assert pair.stop_ids(AsymSpecConfig()) == set(pair.eos_ids) and pair.eos_ids
    assert pair.stop_ids(AsymSpecConfig(ignore_eos=True)) == set()
    assert pair.stop_ids(AsymSpecConfig(ignore_eos=True, stop_token_ids=[5])) == {5}
