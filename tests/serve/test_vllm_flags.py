"""asymspec_vl/serve/vllm_flags.py: `vllm serve`'s flags on `asymspec-vl serve`: the declared engine flags reach
the engine keywords under vLLM's own names, the ones that would change the pair are refused with their reason, any
other flag by name with the Python API (exit 2, a typed error); other commands keep argparse's error."""

import ast
import importlib.util
from pathlib import Path

import pytest

VLLM = Path(importlib.util.find_spec("vllm").origin).parent


def dataclass_fields(path: Path, *classes: str) -> set[str]:
    """The annotated fields of these classes in a vLLM source file (read with ast: nothing imported)."""
    tree = ast.parse(path.read_text())
    return {
        node.target.id
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name in classes
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def run(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """main(argv)'s exit status and stderr; a serve that got past its flags fails here instead of serving."""
    from asymspec_vl.cli import main

    monkeypatch.setattr(
        "asymspec_vl.serve.cli._serve", lambda args: pytest.fail("serve started")
    )
    code = main(argv)
    return code, capsys.readouterr().err


def test_the_engine_flags_are_vllms_engine_arguments_under_their_cli_names():
    from asymspec_vl.serve.vllm_flags import ENGINE_FLAGS, REFUSED

    engine = dataclass_fields(VLLM / "engine" / "arg_utils.py", "EngineArgs")
    frontend = dataclass_fields(
        VLLM / "entrypoints" / "openai" / "cli_args.py",
        "BaseFrontendArgs",
        "FrontendArgs",
    )
    for f in ENGINE_FLAGS:
        assert f.kwarg in engine and f.flag == "--" + f.kwarg.replace("_", "-"), f
    for flag in REFUSED:  # each a flag `vllm serve` takes
        assert flag[2:].replace("-", "_") in engine | frontend, flag


def test_vllm_serve_engine_flags_pass_through_to_the_engine_keywords():
    from asymspec_vl.cli import build_parser
    from asymspec_vl.serve.cli import settings_from_args

    short = build_parser().parse_args("serve -q awq -tp 2 -dp 3".split())
    assert settings_from_args(short).engine_kwargs == {
        "tensor_parallel_size": 2,
        "quantization": "awq",
        "data_parallel_size": 3,
    }
    args = build_parser().parse_args(
        "serve --quantization fp8 --max-num-batched-tokens 4096 --enable-prefix-caching "
        "--no-enable-chunked-prefill --kv-cache-dtype fp8 --seed 7 --block-size 32 "
        "--max-num-seqs 8 --gpu-memory-utilization 0.7".split()
    )
    assert settings_from_args(args).engine_kwargs == {
        "tensor_parallel_size": 1,
        "quantization": "fp8",
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": False,
        "kv_cache_dtype": "fp8",
        "seed": 7,
        "block_size": 32,
        "max_num_seqs": 8,
        "gpu_memory_utilization": 0.7,
    }


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--tokenizer", "other/tok"], "--tokenizer: the pair's tokenizers are"),
        (["--revision", "v2"], "--revision: the pair's files"),
        (["--chat-template=t.jinja"], "--chat-template: each model's prompt"),
        (["--speculative-config", "{}"], "-K"),
        (["--tokenizer-mode", "slow"], "--tokenizer-mode: the pair's tokenizers"),
        (
            ["--disable-log-requests", "--swap-space", "4"],
            "--disable-log-requests, --swap-space: not a flag of `asymspec-vl serve`",
        ),
        (["Qwen/Qwen3-8B"], "serve takes no positional arguments"),
    ],
)
def test_other_vllm_serve_flags_are_refused_by_name_with_exit_2(
    argv, says, capsys, monkeypatch
):
    code, err = run(["serve", *argv], capsys, monkeypatch)
    assert code == 2 and says in err, err
    if "not a flag" in says:
        assert "AsymSpecVL.from_pretrained" in err and "--quantization" in err


def test_the_hf_backend_refuses_the_vllm_engine_flags_it_would_ignore():
    """Read from the flags (not through main, which would start a server were the check missing)."""
    from asymspec_vl.cli import build_parser
    from asymspec_vl.serve.cli import settings_from_args
    from asymspec_vl.serve.vllm_flags import UnsupportedFlagError

    hf = ["serve", "--backend", "hf"]
    refused = build_parser().parse_args([*hf, "--seed", "3", "--enforce-eager"])
    with pytest.raises(
        UnsupportedFlagError, match="--enforce-eager, --seed: vLLM"
    ) as e:
        settings_from_args(refused)
    assert "hf backend" in str(e.value)
    args = build_parser().parse_args([*hf, "--max-num-seqs", "4"])
    assert settings_from_args(args).engine_kwargs["max_num_seqs"] == 4


def test_other_commands_keep_argparses_unrecognized_arguments(capsys):
    from asymspec_vl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["demo", "--bogus"])
    assert e.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
