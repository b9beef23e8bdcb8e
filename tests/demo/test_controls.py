"""demo/controls.py: the decoding sliders' ranges (widened by a command line value outside them, never clamped) and
the page's refusal of a typed number outside a slider's range, by name, as ConfigError."""

import pytest
from asymspec_vl.demo.controls import Slider, check_in_range, sliders

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError


def test_the_sliders_offer_the_papers_ranges_by_field():
    offered = sliders(AsymSpecConfig())
    assert list(offered) == [
        "K",
        "beta",
        "gamma",
        "max_new_tokens",
        "temperature",
        "top_p",
    ]
    assert {f: (s.minimum, s.maximum, s.step) for f, s in offered.items()} == {
        "K": (1, 16, 1),
        "beta": (0, 10, 0.1),
        "gamma": (0.01, 1, 0.01),
        "max_new_tokens": (1, 1024, 1),
        "temperature": (0, 2.0, 0.05),
        "top_p": (0.01, 1, 0.01),
    }
    assert all(s.field == f for f, s in offered.items())
    assert offered["beta"].label.startswith("β") and offered["gamma"].label.startswith(
        "γ"
    )


def test_a_command_line_value_outside_a_range_widens_it():
    """The page must be able to show and send the value it starts with."""
    offered = sliders(
        AsymSpecConfig(gamma=0.001, max_new_tokens=4096, temperature=3.5, top_p=0.005)
    )
    assert offered["gamma"].minimum == 0.001
    assert offered["max_new_tokens"].maximum == 4096
    assert offered["temperature"].maximum == 3.5
    assert offered["top_p"].minimum == 0.005
    for field in (
        "gamma",
        "max_new_tokens",
        "temperature",
        "top_p",
    ):  # each still holds its own default
        s = offered[field]
        check_in_range(offered, **{field: getattr(AsymSpecConfig(), field)})
        assert s.minimum <= s.maximum


@pytest.mark.parametrize(
    "field, value, label, low, high",
    [
        ("K", 17, "K", "1", "16"),
        ("K", 0, "K", "1", "16"),
        ("beta", -0.5, "β", "0", "10"),
        ("gamma", 1.5, "γ", "0.01", "1"),
        ("max_new_tokens", 1025, "max new tokens", "1", "1024"),
        ("temperature", 2.5, "temperature", "0", "2"),
        ("top_p", 0.0, "top-p", "0.01", "1"),
    ],
)
def test_a_number_outside_its_slider_is_refused_by_name(field, value, label, low, high):
    with pytest.raises(ConfigError) as e:
        check_in_range(sliders(AsymSpecConfig()), **{field: value})
    assert str(e.value) == (
        f"{field}={value:g} is out of range: the page's {label} takes {low} to {high}"
    )


def test_the_ends_of_a_range_and_what_is_no_number_pass():
    offered = sliders(AsymSpecConfig())
    check_in_range(
        offered, K=1, beta=10, gamma=0.01, max_new_tokens=1024, temperature=0, top_p=1
    )
    # no number: left to AsymSpecConfig (a bool is no number, whatever Python says)
    check_in_range(
        offered, K="17", beta=None, gamma=True, top_p=False, max_new_tokens=[2000]
    )


def test_the_first_value_out_of_range_is_the_one_named():
    with pytest.raises(ConfigError, match=r"^beta=11 "):
        check_in_range(sliders(AsymSpecConfig()), K=2, beta=11, gamma=5)


def test_a_slider_is_a_frozen_record():
    s = Slider("K", "K", 1, 16, 1)
    with pytest.raises(AttributeError):
        s.maximum = 32
