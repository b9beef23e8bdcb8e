"""vllm_patches.hooks.config_patch and the proposer's set-up on stand-in configs: what an asymspec engine refuses."""

import types

import pytest

from asymspec_vl.doctor.compile_key import keys_of
from vllm_patches.hooks import config_patch


def engine_config(dp: int, moe):
    return types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(method="asymspec"),
        parallel_config=types.SimpleNamespace(data_parallel_size=dp, is_moe_model=moe),
    )


@pytest.mark.parametrize(
    "dp, moe, refused",
    [(1, True, False), (2, False, False), (2, True, True), (2, None, True)],
)
def test_data_parallel_with_a_moe_verifier_is_refused(dp, moe, refused):
    """DP > 1 with a MoE verifier makes every drafter pass a DP collective that the ranks run unequally often."""
    args = types.SimpleNamespace(
        speculative_config={"method": "asymspec"},
        worker_extension_cls="x",
        pipeline_parallel_size=1,
    )
    config = engine_config(dp, moe)
    if refused:
        with pytest.raises(ValueError, match="dense"):
            config_patch.create_engine_config(lambda a: config, args)
    else:
        assert config_patch.create_engine_config(lambda a: config, args) is config


def test_the_drafters_vllm_config_is_built_once(monkeypatch):
    """Built when the model loads; the attention set-up after the CUDA-graph sizes reuses it (no rebuild)."""
    from vllm.v1.spec_decode.draft_model import DraftModelProposer

    from vllm_patches.drafter.proposer import AsymSpecProposer

    built = []
    monkeypatch.setattr(
        DraftModelProposer,
        "_create_draft_vllm_config",
        lambda self: built.append(1) or object(),
    )
    proposer = AsymSpecProposer.__new__(AsymSpecProposer)
    first = proposer._create_draft_vllm_config()
    assert proposer._create_draft_vllm_config() is first and built == [1]


# -- the compile-cache key -----------------------------------------------------------------------------------------
@pytest.mark.vllm
def test_engines_of_two_asymspec_vl_versions_get_different_compile_cache_keys(
    tiny_models, monkeypatch
):
    """A graph compiled by one version is never loaded (guards dropped) by another: both keys of both models move."""
    monkeypatch.setattr(config_patch, "asymspec_vl_version", lambda: "0.1.0")
    old = keys_of(tiny_models)
    assert keys_of(tiny_models) == old  # the key is stable
    monkeypatch.setattr(config_patch, "asymspec_vl_version", lambda: "0.1.1")
    new = keys_of(tiny_models)
    for model in ("verifier", "drafter"):
        assert old[model][0] != new[model][0] and old[model][1] != new[model][1], model


@pytest.mark.vllm
def test_the_key_holds_the_method_and_the_drafters_traced_call_layout(
    tiny_models, monkeypatch
):
    """A stock draft_model engine on the same pair (the same traced files and settings) gets other keys, and so
    does a bump of DRAFTER_TRACE_LAYOUT."""
    from vllm_patches.version import DRAFTER_TRACE_LAYOUT, asymspec_vl_version

    assert config_patch.compile_key_factors() == [
        "asymspec",
        asymspec_vl_version(),
        f"drafter-trace-layout-{DRAFTER_TRACE_LAYOUT}",
    ]
    ours = keys_of(tiny_models)
    stock = keys_of(tiny_models, "draft_model")
    monkeypatch.setattr(config_patch, "DRAFTER_TRACE_LAYOUT", DRAFTER_TRACE_LAYOUT + 1)
    bumped = keys_of(tiny_models)
    for model in ("verifier", "drafter"):
        assert len({ours[model][0], stock[model][0], bumped[model][0]}) == 3, model
        assert len({ours[model][1], stock[model][1], bumped[model][1]}) == 3, model
    assert ours["verifier"] != ours["drafter"]


# -- requests vLLM's input processor checks ----------------------------------------------------------------------
@pytest.mark.vllm
@pytest.mark.parametrize("cpu_build", [True, False])
def test_a_plain_sampling_request_is_refused_by_name_on_the_cpu_build_only(
    monkeypatch, cpu_build
):
    """A request without asymspec args that samples goes to vLLM's rejection sampler, which the CPU build lacks:
    refused where vLLM checks a request (SamplingParams.verify), naming the fix, instead of failed by the
    workers (a server's bare 500). Greedy plain requests and sampling asymspec requests pass; other methods keep
    vLLM's checks."""
    from vllm.sampling_params import SamplingParams

    from vllm_patches.requests.request_args import RequestArgsError

    monkeypatch.setattr(config_patch, "is_cpu_build", lambda: cpu_build)
    stock = []
    spec = types.SimpleNamespace(method="asymspec")

    def check(params, speculative_config=spec):
        return config_patch.validate_spec_decode(
            lambda p, s: stock.append(p), params, speculative_config
        )

    sampled = SamplingParams(temperature=1.0)
    if cpu_build:
        with pytest.raises(RequestArgsError, match="rejection sampler.*temperature=0"):
            check(sampled)
    else:
        check(sampled)
        assert stock == [sampled]
    stock.clear()
    greedy = SamplingParams(temperature=0.0)
    check(greedy)
    asym = SamplingParams(temperature=1.0, min_p=0.1, extra_args={"asymspec": {}})
    check(asym)
    check(sampled, types.SimpleNamespace(method="eagle"))
    assert stock == [greedy, sampled]


# -- pipeline parallelism ------------------------------------------------------------------------------------------
@pytest.mark.vllm
def test_llm_users_asking_for_pipeline_parallelism_are_refused_by_name(tiny_models):
    """LLM(...) / AsyncLLM with the plugin: refused in EngineArgs.create_engine_config, before any model loads."""
    from vllm.engine.arg_utils import EngineArgs

    from asymspec_vl.core.errors import ParallelismError

    config_patch.patch_speculative_config()
    args = EngineArgs(
        model=str(tiny_models["verifier"]),
        pipeline_parallel_size=2,
        speculative_config={
            "method": "asymspec",
            "model": str(tiny_models["vl_drafter"]),
            "num_speculative_tokens": 2,
        },
    )
    with pytest.raises(ParallelismError, match="pipeline_parallel_size=2"):
        args.create_engine_config()


@pytest.mark.vllm
def test_vllms_own_server_with_the_plugin_refuses_pipeline_parallelism(tiny_models):
    """`python -m vllm.entrypoints.openai.api_server` as users start it (the plugin loads through its entry point):
    the start stops at the refusal, by name, not at a worker's AttributeError."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[3])
    spec = {
        "method": "asymspec",
        "model": str(tiny_models["vl_drafter"]),
        "num_speculative_tokens": 2,
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(tiny_models["verifier"]),
            "--speculative-config",
            json.dumps(spec),
            "--pipeline-parallel-size",
            "2",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert run.returncode != 0
    assert "ParallelismError" in run.stderr and "pipeline_parallel_size=2" in run.stderr


_START = """
import sys
from vllm_patches.hooks import config_patch
config_patch.asymspec_vl_version = lambda: sys.argv[3]
from asymspec_vl import AsymSpecVL
vl = AsymSpecVL.from_pretrained(drafter=sys.argv[1], verifier=sys.argv[2], backend="vllm", enforce_eager=False)
vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
vl.backend.close()
"""


def aot_dirs(root) -> set:
    """The AOT artifacts' key folders under a VLLM_CACHE_ROOT (compilation/decorators.py)."""
    folder = root / "torch_compile_cache" / "torch_aot_compile"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


@pytest.mark.vllm
def test_a_compiled_engine_after_a_version_change_compiles_afresh(
    tiny_models, tmp_path
):
    """Two starts of a compiled asymspec engine on one VLLM_CACHE_ROOT, as an upgrade makes them (two processes):
    the second, of another asymspec-vl version, writes its own artifacts and loads none of the first's (on a GPU
    it would load them with their guards off; on the CPU build a load fails and recompiles, so the folders say it)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }

    def start(version: str) -> str:
        run = subprocess.run(
            [
                sys.executable,
                "-c",
                _START,
                str(tiny_models["vl_drafter"]),
                str(tiny_models["verifier"]),
                version,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout + run.stderr

    start("1.0")
    first = aot_dirs(tmp_path)
    assert len(first) == 2  # the verifier's and the drafter's
    log = start("2.0")
    second = aot_dirs(tmp_path) - first
    assert len(second) == 2 and "Directly load AOT" not in log
    assert not any(d in log for d in first)  # not even tried
