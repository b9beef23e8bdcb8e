"""What a new user meets on the command line: the top-level description, help for every option with each
default shown once (no Python lists), and the messages of `generate`, `caption` and `toy example`."""

import argparse
import re
import shlex

import pytest

from asymspec_vl.cli import build_parser, main

# The commands this suite owns (eval's options are tested with the evals).
COMMANDS = [
    ["generate"],
    ["tiny-models"],
    ["demo"],
    ["caption"],
    ["toy", "train"],
    ["toy", "example"],
]


def _subparser(
    parser: argparse.ArgumentParser, path: list[str]
) -> argparse.ArgumentParser:
    for name in path:
        sub = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        )
        parser = sub.choices[name]
    return parser


def _option_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's help text as printed (wrapped lines joined)."""
    text = parser.format_help()
    blocks = re.split(r"\n  (?=-)", text)
    return {b.split()[0].rstrip(","): " ".join(b.split()) for b in blocks[1:]}


def test_the_top_level_help_says_what_the_tool_does(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert (
        "Answer questions about images with a text-only LLM" in out and "drafter" in out
    )
    assert "registered by the modules" not in out
    assert (
        "asymspec-vl demo" in out and "asymspec-vl toy example DIR" in out
    )  # where to start
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_option_has_help_and_its_default_once(path):
    parser = _subparser(build_parser(), path)
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction):
            assert action.help and action.help.strip(), (
                f"{' '.join(path)} {action.option_strings or action.dest}"
            )
    for text in _option_help(parser).values():
        assert text.count("(default:") <= 1, text
        assert (
            "default: None" not in text
            and "(default: )" not in text
            and "default: False" not in text
        ), text
        assert not re.search(r"[\[(]'", text), f"a Python list or tuple in: {text}"


def test_generate_and_demo_help_show_their_defaults():
    helps = _option_help(_subparser(build_parser(), ["generate"]))
    assert (
        "(default: 2)" in helps["-K"] and "(default: 256)" in helps["--max-new-tokens"]
    )
    assert (
        "comma-separated, from: asymspec, sd, scd, floor, drafter;"
        in helps["--methods"]
    )
    assert (
        helps["--methods"].endswith("(default: asymspec)")
        and "× Floor" in helps["--methods"]
    )
    for option in ("--question", "--backend", "--gate", "--delta-source", "--bonus"):
        assert len(helps[option].split()) > 4, helps[option]
    assert "(default: cda)" in helps["--gate"] and "JSD" in helps["--gate"]
    assert "(default: cuda if available, else cpu)" in helps["--device"]
    helps = _option_help(_subparser(build_parser(), ["demo"]))
    assert (
        "(default: 127.0.0.1)" in helps["--host"]
        and "(default: 7860)" in helps["--port"]
    )
    assert (
        "(default: 2)" in helps["-K"] and "(default: 64)" in helps["--max-new-tokens"]
    )
    assert (
        "(default: 10)" in helps["--max-upload-mb"]
        and "(default: 16000000)" in helps["--max-image-pixels"]
    )


def test_generate_without_a_view_says_the_verifier_is_blind(
    tiny_models, tmp_path, capsys
):
    from helpers import random_image

    image = tmp_path / "scene.png"
    random_image(1).save(image)
    models = [
        "--drafter",
        str(tiny_models["vl_drafter"]),
        "--verifier",
        str(tiny_models["verifier"]),
        "--max-new-tokens",
        "4",
    ]
    assert (
        main(
            [
                "generate",
                "--image",
                str(image),
                "--question",
                "What is shown?",
                "--methods",
                "floor,asymspec",
                *models,
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "no --caption and no --ocr: the verifier reads only the question" in err
    assert (
        f"-m asymspec_vl.cli caption {image}" in err
    )  # as this process was started (python -m under pytest)
    floor, asym = [line for line in out.splitlines() if line.startswith("== ")]
    # the figures that apply: no acceptance for the Floor (it drafts nothing), acceptance and δ-fused for AsymSpec
    assert (
        floor.startswith("== floor: 4 tokens, ")
        and "acceptance" not in floor
        and "fused" not in floor
    )
    assert (
        "acceptance " in asym and "mean accepted length " in asym and "δ-fused" in asym
    )
    main(
        [
            "generate",
            "--image",
            str(image),
            "--question",
            "What is shown?",
            "--caption",
            "a chart",
            *models,
        ]
    )
    assert "no --caption" not in capsys.readouterr().err
    main(
        [
            "generate",
            "--image",
            str(image),
            "--question",
            "What is shown?",
            "--methods",
            "drafter",
            *models,
        ]
    )
    assert (
        "no --caption" not in capsys.readouterr().err
    )  # the drafter alone reads the image, not the view


def test_caption_names_its_producers_and_refuses_the_toy_drafter(tmp_path, capsys):
    from pathlib import Path

    chart = Path(__file__).resolve().parents[1] / "demo" / "examples" / "chart.png"
    assert main(["caption", str(chart), "--model", "embedded"]) == 2
    assert "the embedded toy drafter cannot caption images" in capsys.readouterr().err
    assert main(["caption", str(chart), "--no-ocr"]) == 2
    assert "nothing to do" in capsys.readouterr().err
    assert main(["caption", str(chart), "--cache-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert (
        out.startswith("OCR text (by EasyOCR 1.7.")
        and "Sales per year" in out
        and "Caption" not in out
    )
    assert "no caption: pass --model with a vision-language model" in err


def test_toy_example_prints_commands_that_paste_and_run(tmp_path, capsys):
    assert main(["toy", "example", str(tmp_path / "ex"), "--n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    assert len(commands) == 2 and all(
        line.startswith("# expected answer: ") for line in lines[::2]
    )
    for argv in (
        commands
    ):  # this process was started as python -m asymspec_vl.cli: so are the commands
        assert argv[1:4] == ["-m", "asymspec_vl.cli", "generate"]
        args = build_parser().parse_args(argv[3:])
        assert (
            (tmp_path / "ex").joinpath(args.image.split("/")[-1]).is_file()
            and args.caption
            and args.question
        )
    assert main(commands[0][3:] + ["--max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    assert [
        line.split(":")[0] for line in out.splitlines() if line.startswith("==")
    ] == ["== asymspec", "== floor", "== drafter"]


def test_a_bare_command_lists_the_commands(capsys):
    from asymspec_vl.cli import main

    assert main([]) == 2
    err = capsys.readouterr().err
    assert (
        all(f"\n    {name} " in err for name in ("generate", "demo", "eval", "serve"))
        and "start here" in err
    )


def test_help_imports_no_torch():
    """`asymspec-vl --help` builds every command's parser without importing torch (5-18 s on a loaded machine):
    the handlers import what they need when they run."""
    import subprocess
    import sys

    code = (
        "import sys; from asymspec_vl.cli import build_parser; build_parser(); "
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'gradio') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-1500:]
