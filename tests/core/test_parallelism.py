"""asymspec_vl.core.parallelism: pipeline parallelism is refused by name (ParallelismError) wherever it is asked
for: the Python API (either backend), the vLLM backend a server builds, the command line and `asymspec-vl serve`
(vLLM's own server with the plugin: tests/vllm_patches/hooks/test_config_patch.py)."""

import pytest
from helpers import random_image

from asymspec_vl.core.errors import ConfigError, ParallelismError
from asymspec_vl.core.parallelism import refuse_pipeline_parallelism


@pytest.mark.parametrize("size", [None, 1])
def test_one_stage_passes(size):
    refuse_pipeline_parallelism(size, "pipeline_parallel_size")


def test_more_stages_are_refused_naming_the_setting_and_what_to_use():
    with pytest.raises(ParallelismError) as e:
        refuse_pipeline_parallelism(2, "--pipeline-parallel-size")
    assert isinstance(e.value, ConfigError)
    for words in (
        "--pipeline-parallel-size=2",
        "tensor_parallel_size",
        "data_parallel_size",
    ):
        assert words in str(e.value)


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_the_python_api_refuses_before_loading(backend, monkeypatch):
    from asymspec_vl import AsymSpecVL, api

    monkeypatch.setattr(
        api.ModelPair,
        "load",
        lambda *a: (_ for _ in ()).throw(AssertionError("loaded")),
    )
    with pytest.raises(ParallelismError, match="pipeline_parallel_size=2"):
        AsymSpecVL.from_pretrained(
            drafter="embedded",
            verifier="embedded",
            backend=backend,
            pipeline_parallel_size=2,
        )


def test_the_vllm_backend_a_server_builds_refuses():
    """serve/vllm_runner.py builds VLLMBackend(...) itself, with the server's engine kwargs."""
    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend

    with pytest.raises(ParallelismError, match="pipeline_parallel_size=2"):
        VLLMBackend(None, "d", "v", None, "auto", 1, {"pipeline_parallel_size": 2})


def test_the_command_line_refuses_by_name(tmp_path, capsys, monkeypatch):
    from asymspec_vl import api
    from asymspec_vl.cli import main

    monkeypatch.setattr(
        api.AsymSpecVL,
        "from_pretrained",
        lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")),
    )
    image = tmp_path / "x.png"
    random_image(0).save(image)
    argv = ["generate", "--image", str(image), "--question", "What?"]
    code = main([*argv, "--backend", "vllm", "--pipeline-parallel-size", "2"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and "--pipeline-parallel-size=2" in err
        and "tensor_parallel_size" in err
    )


def test_serve_refuses_by_name(capsys):
    from asymspec_vl.cli import build_parser, main
    from asymspec_vl.serve.cli import settings_from_args

    with pytest.raises(ParallelismError, match="--pipeline-parallel-size=2"):
        settings_from_args(
            build_parser().parse_args(["serve", "--pipeline-parallel-size", "2"])
        )
    assert main(["serve", "--pipeline-parallel-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "pipeline parallelism" in err and "unrecognized arguments" not in err
    settings_from_args(
        build_parser().parse_args(["serve", "--pipeline-parallel-size", "1"])
    )
