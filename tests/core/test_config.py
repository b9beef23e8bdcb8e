"""AsymSpecConfig validation: every invalid field is refused with a message naming it and its range."""

import pytest

from asymspec_vl import AsymSpecConfig, ConfigError


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("K", 0, "[1, 16]"),
        ("K", 2.5, "[1, 16]"),
        ("K", True, "[1, 16]"),
        ("beta", -0.1, "[0, 10]"),
        ("beta", float("nan"), "[0, 10]"),
        ("gamma", 0.0, "(0, 1]"),
        ("gamma", 1.5, "(0, 1]"),
        ("gate", "jsd", "cda"),
        ("delta_source", "a-b", "contrastive"),
        ("bonus", "draft", "verifier"),
        ("lam", -1.0, "[0, 100]"),
        ("max_new_tokens", 0, "[1, 1000000]"),
        ("scd_alpha", 0.0, "(0, 1]"),
        ("stop_token_ids", [-1], "non-negative"),
    ],
)
def test_invalid_field_is_named(field, value, expected):
    with pytest.raises(ConfigError) as e:
        AsymSpecConfig(**{field: value})
    assert f"AsymSpecConfig.{field}=" in str(e.value) and expected in str(e.value)
    assert isinstance(e.value, ValueError)


def test_defaults_and_replace():
    cfg = AsymSpecConfig()
    assert (cfg.K, cfg.beta, cfg.gamma, cfg.gate, cfg.delta_source, cfg.bonus) == (
        2,
        1.0,
        0.5,
        "cda",
        "contrastive",
        "verifier",
    )
    assert cfg.replace(K=4).K == 4
    with pytest.raises(ConfigError, match="unknown"):
        cfg.replace(k=4)
    with pytest.raises(ConfigError, match="gamma"):
        cfg.replace(gamma=2.0)
    assert AsymSpecConfig(stop_token_ids=[3, 4]).stop_token_ids == (3, 4)


def test_an_empty_stop_list_is_refused_and_ignore_eos_says_it():
    """Issue 22 item 11: stop_token_ids=[] silently ran every answer to the budget; ignore_eos=True says so."""
    for empty in ([], (), set()):
        with pytest.raises(
            ConfigError,
            match=r"stop_token_ids=.* expected at least one token id.*ignore_eos=True",
        ):
            AsymSpecConfig(stop_token_ids=empty)
    with pytest.raises(ConfigError, match="ignore_eos"):
        AsymSpecConfig(ignore_eos=1)
    assert (
        "ignore_eos" not in AsymSpecConfig().to_dict()
    )  # the settings of earlier runs read the same
    assert AsymSpecConfig(ignore_eos=True).to_dict()["ignore_eos"] is True
    assert AsymSpecConfig(
        **AsymSpecConfig(ignore_eos=True).to_dict()
    ) == AsymSpecConfig(ignore_eos=True)


def test_ignore_eos_leaves_no_stop_token_and_stop_ids_still_stop(tiny_vl):
    pair = tiny_vl.pair
    assert pair.stop_ids(AsymSpecConfig()) == set(pair.eos_ids) and pair.eos_ids
    assert pair.stop_ids(AsymSpecConfig(ignore_eos=True)) == set()
    assert pair.stop_ids(AsymSpecConfig(ignore_eos=True, stop_token_ids=[5])) == {5}


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("temperature", -0.1, "[0, 100]"),
        ("temperature", float("inf"), "[0, 100]"),
        ("temperature", "0.7", "[0, 100]"),
        ("top_p", 0.0, "(0, 1]"),
        ("top_p", 1.5, "(0, 1]"),
        ("top_k", -2, "non-negative"),
        ("top_k", 2.0, "integer"),
        ("min_p", 1.5, "[0, 1]"),
        ("seed", 1.5, "integer"),
        ("seed", True, "integer"),
        ("seed", 2**64, "integer"),
        ("stop", [""], "non-empty"),
        ("stop", [3], "strings"),
        ("stop", "", "non-empty"),
        ("stop", None, "strings"),
        ("include_stop_str_in_output", 1, "True or False"),
        ("min_tokens", -1, "[0, max_new_tokens=256]"),
        ("min_tokens", 257, "[0, max_new_tokens=256]"),
    ],
)
def test_invalid_sampling_field_is_named(field, value, expected):
    with pytest.raises(ConfigError) as e:
        AsymSpecConfig(**{field: value})
    assert f"AsymSpecConfig.{field}=" in str(e.value) and expected in str(e.value)


def test_sampling_fields_defaults_normalised_and_round_trip():
    cfg = AsymSpecConfig()
    assert (
        cfg.temperature,
        cfg.top_p,
        cfg.top_k,
        cfg.min_p,
        cfg.seed,
        cfg.stop,
        cfg.include_stop_str_in_output,
        cfg.min_tokens,
    ) == (0.0, 1.0, 0, 0.0, None, (), False, 0) and not cfg.samples
    assert AsymSpecConfig(stop="END").stop == ("END",) and AsymSpecConfig(
        stop=["a", "b"]
    ).stop == ("a", "b")
    assert set(AsymSpecConfig().to_dict()) == {
        "K",
        "beta",
        "gamma",
        "gate",
        "lam",
        "delta_source",
        "bonus",
        "max_new_tokens",
        "stop_token_ids",
        "scd_alpha",
    }  # fingerprints
    hot = AsymSpecConfig(
        temperature=0.7,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        seed=3,
        stop=("x",),
        min_tokens=2,
        include_stop_str_in_output=True,
    )
    assert hot.samples and AsymSpecConfig(**hot.to_dict()) == hot


def test_numpy_scalars_are_numbers_and_top_k_minus_one_is_off():
    """Issue 33: np.float32(0.7) or np.int64(3) were ConfigErrors; top_k -1 (vLLM's "off") was refused."""
    import numpy as np

    from asymspec_vl import AsymSpecConfig

    cfg = AsymSpecConfig(
        K=np.int64(3),
        temperature=np.float32(0.5),
        top_k=np.int64(5),
        seed=np.int64(7),
        max_new_tokens=np.int32(8),
    )
    assert (cfg.K, cfg.temperature, cfg.top_k, cfg.seed, cfg.max_new_tokens) == (
        3,
        0.5,
        5,
        7,
        8,
    )
    assert type(cfg.K) is int and type(cfg.temperature) is float
    assert AsymSpecConfig(top_k=-1).top_k == 0
    with pytest.raises(ConfigError, match="top_k=-2"):
        AsymSpecConfig(top_k=-2)
    with pytest.raises(ConfigError, match="ignore_eos"):
        AsymSpecConfig(ignore_eos=np.bool_(True))  # a bool field takes bools only
