"""The `asymspec-vl` command: subcommands registered by the modules that implement them."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .commands import HelpFormatter, fill_pair_defaults
from .core.errors import AsymSpecError
from .quiet import results_only_stdout

DESCRIPTION = """\
Answer questions about images with a text-only LLM (the verifier, e.g.
Qwen3-32B) that reads a caption and the OCR text of the image, while a small
vision-language drafter (e.g. Qwen3-VL-2B) that sees the pixels steers it token
by token (AsymSpec speculative decoding). Without --drafter / --verifier the
commands run the embedded toy pair, offline on the CPU."""
EPILOG = """\
start here:
  asymspec-vl demo             a web page: upload an image, ask, see where
                               each token of the answer came from
  asymspec-vl eval toy         the toy world's table: AsymSpec and baselines
  asymspec-vl toy example DIR  toy scenes, with the commands that answer them
`asymspec-vl COMMAND --help` lists a command's options."""

# Each module defines register(subparsers); its handlers import heavy libraries lazily.
COMMAND_MODULES = [
    "asymspec_vl.commands",
    "asymspec_vl.demo.cli",
    "asymspec_vl.captioners.cli",
    "asymspec_vl.evals.cli",
    "asymspec_vl.evals.verifier_words",
    "asymspec_vl.toy.cli",
    "asymspec_vl.doctor.cli",
    "asymspec_vl.serve.cli",
]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help (and its subcommands' help, unless they choose) uses HelpFormatter."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        fill_pair_defaults(parsed)
        return parsed, rest


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="asymspec-vl", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    if not (
        sys.argv[1:] if argv is None else argv
    ):  # a bare `asymspec-vl`: the commands, not only a usage line
        parser.print_help(sys.stderr)
        return 2
    args, rest = parser.parse_known_args(argv)
    # a command may explain the flags it does not take (serve: vLLM's); others get argparse's error
    unknown = getattr(args, "unknown_flags", None)
    if rest and unknown is None:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if rest:
            unknown(rest)  # raises a typed error naming them
        with (
            results_only_stdout()
        ):  # stdout: the command's results; every library's log: stderr
            return int(args.func(args) or 0)
    except AsymSpecError as e:
        print(f"asymspec-vl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asymspec-vl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
