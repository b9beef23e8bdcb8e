"""The page's decoding sliders: each one's range, used to build it and to refuse a value outside it (by name,
as ConfigError: the page's "A setting is out of range"), never to clamp one."""

from __future__ import annotations

from dataclasses import dataclass

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError


@dataclass(frozen=True)
class Slider:
    """One slider of "Decoding controls": the AsymSpecConfig field it sets and the range the page offers."""

    field: str
    label: str
    minimum: float
    maximum: float
    step: float


def sliders(cfg: AsymSpecConfig) -> dict[str, Slider]:
    """The sliders, by field; a command line value outside a slider's usual range widens it (the page must be
    able to show and send it)."""
    return {
        s.field: s
        for s in (
            Slider("K", "K (draft tokens per step)", 1, 16, 1),
            Slider("beta", "β (δ-fusion weight)", 0, 10, 0.1),
            Slider("gamma", "γ (acceptance threshold)", min(0.01, cfg.gamma), 1, 0.01),
            Slider(
                "max_new_tokens", "max new tokens", 1, max(1024, cfg.max_new_tokens), 1
            ),
            Slider(
                "temperature",
                "temperature (0: greedy, the paper's Algorithm 1)",
                0,
                max(2.0, cfg.temperature),
                0.05,
            ),
            Slider("top_p", "top-p (1: off)", min(0.01, cfg.top_p), 1, 0.01),
        )
    }


def check_in_range(offered: dict[str, Slider], **values) -> None:
    """ConfigError naming the first value (a number) outside its slider's range. Gradio's slider puts a typed
    number back into its range when the box loses focus, so the page stops that (app.HEAD) and checks here:
    what ran is what the user typed, or nothing. Values that are no number are left to AsymSpecConfig."""
    for field, value in values.items():
        s = offered[field]
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and not s.minimum <= value <= s.maximum
        ):
            raise ConfigError(
                f"{field}={value:g} is out of range: the page's {s.label.split(' (')[0]} takes "
                f"{s.minimum:g} to {s.maximum:g}"
            )
