"""Every default is written once: the method's in AsymSpecConfig, the product's limits in limits.LIMITS; the CLI,
the server, the demo, the library and the benchmarks read them (a retyped default that drifts fails here)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

from asymspec_vl.cli import build_parser
from asymspec_vl.commands import config_flag, config_from_args
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.limits import LIMITS
from asymspec_vl.inputs import images

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [f.name for f in dataclasses.fields(AsymSpecConfig)]


def _parser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        )
        parser = sub.choices[name]
    return parser


def _defaults(parser: argparse.ArgumentParser) -> dict:
    return {a.dest: a.default for a in parser._actions}


@pytest.mark.parametrize(
    "path, expected",
    [
        (("generate",), AsymSpecConfig()),
        (("demo",), AsymSpecConfig(max_new_tokens=LIMITS.demo_answer_tokens)),
    ],
    ids=["generate", "demo"],
)
def test_each_commands_decoding_defaults_are_asymspec_configs(path, expected):
    parser = _parser(*path)
    defaults = _defaults(parser)
    assert {f: defaults[f] for f in FIELDS} == dataclasses.asdict(
        expected
    )  # every field has an option
    assert (
        config_from_args(
            parser.parse_args(
                ["--image", "x", "--question", "q"] if path == ("generate",) else []
            )
        )
        == expected
    )


def test_mathvista_reads_the_papers_protocol():
    from evals.mathvista.protocol import PAPER_DECODING

    defaults = _defaults(_parser("eval", "mathvista"))
    assert {f: defaults[f] for f in FIELDS} == dataclasses.asdict(
        AsymSpecConfig(**PAPER_DECODING)
    )


def test_config_from_args_round_trips_every_field():
    """Every field set away from its default comes back through the flags (scd_alpha and stop_token_ids too)."""
    changed = AsymSpecConfig(
        K=5,
        beta=0.5,
        gamma=0.25,
        gate="kl",
        lam=0.5,
        delta_source="raw",
        bonus="fused",
        max_new_tokens=7,
        stop_token_ids=(3, 4),
        scd_alpha=0.25,
        ignore_eos=True,
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        seed=7,
        stop=("x", "y"),
        include_stop_str_in_output=True,
        min_tokens=2,
        structured_output={"regex": "[0-9]+"},
        logprobs=3,
        prompt_logprobs=2,
    )
    assert all(getattr(changed, f) != getattr(AsymSpecConfig(), f) for f in FIELDS)
    argv = ["--image", "x", "--question", "q"]
    for f in FIELDS:
        value = getattr(changed, f)
        if value is True:
            argv.append(config_flag(f))
        elif f == "structured_output":
            argv += [config_flag(f), json.dumps(value.to_dict())]
        else:
            argv += [
                config_flag(f),
                ",".join(map(str, value)) if isinstance(value, tuple) else str(value),
            ]
    assert config_from_args(_parser("generate").parse_args(argv)) == changed


def test_an_invalid_flag_value_names_its_flag():
    from asymspec_vl.core.errors import ConfigError

    with pytest.raises(ConfigError, match="^--scd-alpha 0.0 is invalid"):
        config_from_args(
            _parser("generate").parse_args(
                ["--image", "x", "--question", "q", "--scd-alpha", "0"]
            )
        )


def test_the_server_the_demo_and_the_library_read_the_limits_table():
    from asymspec_vl.backends.vllm.engine import DEFAULT_SPEC_TOKENS
    from asymspec_vl.serve.settings import ServeSettings
    from demo.service import DemoService

    serve = _defaults(_parser("serve"))
    assert (
        serve["K"],
        serve["max_body_mb"] * 2**20,
        serve["max_image_mb"] * 2**20,
        serve["max_image_pixels"],
        serve["max_tokens"],
    ) == (
        LIMITS.speculative_tokens,
        LIMITS.body_bytes,
        LIMITS.image_bytes,
        LIMITS.image_pixels,
        LIMITS.answer_tokens,
    )
    settings = ServeSettings("d", "v")
    assert (
        settings.K,
        settings.max_body_bytes,
        settings.max_image_bytes,
        settings.max_image_pixels,
        settings.max_tokens,
    ) == (
        LIMITS.speculative_tokens,
        LIMITS.body_bytes,
        LIMITS.image_bytes,
        LIMITS.image_pixels,
        LIMITS.answer_tokens,
    )
    demo = _defaults(_parser("demo"))
    assert (demo["max_upload_mb"] * 2**20, demo["max_image_pixels"]) == (
        LIMITS.demo_image_bytes,
        LIMITS.demo_image_pixels,
    )
    service = inspect.signature(DemoService).parameters
    assert (service["max_file_bytes"].default, service["max_image_pixels"].default) == (
        LIMITS.demo_image_bytes,
        LIMITS.demo_image_pixels,
    )
    load = inspect.signature(images.load_image).parameters
    assert (load["max_bytes"].default, load["max_pixels"].default) == (
        LIMITS.image_bytes,
        LIMITS.image_pixels,
    )
    assert DEFAULT_SPEC_TOKENS == LIMITS.speculative_tokens


# a K default written as a number (K=0 marks "no drafts"): `K: int = 4`, `"--K", type=int, default=2`,
# `BASE = AsymSpecConfig(K=2, ...)`
K_LITERAL = re.compile(
    r"\bK: int = [1-9]|\"--K\"[^\n]*default=\d|^BASE = AsymSpecConfig\([^)]*\bK=\d",
    re.M,
)


def test_no_module_retypes_a_default_K():
    """config.py holds the method's K, limits.py the engines'; everywhere else reads them."""
    files = [
        p
        for folder in ("asymspec_vl", "demo", "evals")
        for p in (ROOT / folder).rglob("*.py")
    ]
    found = [
        str(p.relative_to(ROOT))
        for p in files
        if p.name not in ("config.py", "limits.py") and K_LITERAL.search(p.read_text())
    ]
    assert found == []
