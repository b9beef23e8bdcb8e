"""The `asymspec-vl` command: subcommands registered by the modules that implement them."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import AsymSpecError

# Each module defines register(subparsers); its handlers import heavy libraries lazily.
COMMAND_MODULES = [
    "asymspec_vl.commands",
    "asymspec_vl.demo.cli",
    "asymspec_vl.captioners.cli",
    "asymspec_vl.evals.cli",
    "asymspec_vl.toy.cli",
    "asymspec_vl.doctor",
    "asymspec_vl.serve.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec-vl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AsymSpecError as e:
        print(f"asymspec-vl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asymspec-vl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
