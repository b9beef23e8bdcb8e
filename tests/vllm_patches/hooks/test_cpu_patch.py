"""vllm_patches.hooks.cpu_patch on a stand-in runner: an asymspec engine's CPU runner is built as vLLM builds it
less the speculative-decoding refusal, loads the drafter, and first traces its models at the whole token budget
(the GPU's profile run); every other engine keeps vLLM's stock steps (its refusal included); the patch wraps once."""

import contextlib
import types

import pytest
import torch
from vllm.v1.worker import cpu_model_runner

from vllm_patches.hooks import cpu_patch
from vllm_patches.hooks._patching import is_patched, unwrap


def config(method: str | None, inductor: dict | None = None):
    spec = None if method is None else types.SimpleNamespace(method=method)
    compilation = types.SimpleNamespace(inductor_compile_config=dict(inductor or {}))
    return types.SimpleNamespace(
        speculative_config=spec, compilation_config=compilation
    )


def stock(calls: list, name: str):
    return lambda *args: calls.append((name, *args))


def test_other_engines_keep_the_stock_constructor(monkeypatch):
    calls = []
    monkeypatch.setattr(
        cpu_model_runner, "GPUModelRunner", pytest.fail
    )  # never reached
    for method in (None, "eagle"):
        cfg = config(method)
        cpu_patch.init(stock(calls, "init"), "runner", cfg, torch.device("cpu"))
        assert calls[-1] == ("init", "runner", cfg, torch.device("cpu"))


def test_an_asymspec_runner_is_built_as_vllm_builds_it_without_the_refusal(
    monkeypatch,
):
    events = []

    @contextlib.contextmanager
    def cuda_wrapper():
        events.append("wrap")
        yield
        events.append("unwrap")

    class GPUModelRunner:
        def __init__(self, vllm_config, device):  # called unbound, on the CPU runner
            events.append(("gpu init", self, vllm_config, device))

    monkeypatch.setattr(cpu_model_runner, "_torch_cuda_wrapper", cuda_wrapper)
    monkeypatch.setattr(cpu_model_runner, "GPUModelRunner", GPUModelRunner)
    runner = types.SimpleNamespace(
        use_cuda_graph=True,
        cascade_attn_enabled=True,
        _postprocess_tensors=lambda: events.append("tensors"),
        _postprocess_triton=lambda: events.append("triton"),
    )
    cfg = config("asymspec")
    cpu_patch.init(pytest.fail, runner, cfg, torch.device("cpu"))
    assert events == [
        "wrap",
        ("gpu init", runner, cfg, torch.device("cpu")),
        "unwrap",
        "tensors",
        "triton",
    ]
    assert runner.use_cuda_graph is False and runner.cascade_attn_enabled is False
    with pytest.raises(AssertionError):  # vLLM's CPU runner only runs on the CPU
        cpu_patch.init(pytest.fail, runner, cfg, torch.device("meta"))


def test_an_asymspec_runner_compiles_without_inductors_index_asserts_unless_asked(
    monkeypatch,
):
    """Set before GPUModelRunner.__init__ (the models' compile wrappers and the drafter's config read it); a
    config's own setting is kept; other engines keep theirs (inductor's default: asserts on)."""
    seen = []

    class GPUModelRunner:
        def __init__(self, vllm_config, device):
            seen.append(dict(vllm_config.compilation_config.inductor_compile_config))

    monkeypatch.setattr(cpu_model_runner, "_torch_cuda_wrapper", contextlib.nullcontext)
    monkeypatch.setattr(cpu_model_runner, "GPUModelRunner", GPUModelRunner)
    runner = types.SimpleNamespace(
        _postprocess_tensors=lambda: None, _postprocess_triton=lambda: None
    )
    for inductor, expected in (({}, False), ({"assert_indirect_indexing": True}, True)):
        cpu_patch.init(
            pytest.fail, runner, config("asymspec", inductor), torch.device("cpu")
        )
        assert seen[-1]["assert_indirect_indexing"] is expected
    plain = config(None)
    cpu_patch.init(lambda *a: None, runner, plain, torch.device("cpu"))
    assert plain.compilation_config.inductor_compile_config == {}


def test_the_drafter_loads_with_the_verifier_on_asymspec_engines_only():
    for method, drafter_loads in (("asymspec", True), ("eagle", False), (None, False)):
        calls = []
        runner = types.SimpleNamespace(
            vllm_config=config(method),
            model="verifier-model",
            drafter=types.SimpleNamespace(
                load_model=lambda model, calls=calls: calls.append(("drafter", model))
            ),
        )
        cpu_patch.load_model(stock(calls, "load"), runner, True)
        expected = [("load", runner, True)]
        if drafter_loads:
            expected.append(("drafter", "verifier-model"))
        assert calls == expected


def test_an_asymspec_engine_is_first_traced_at_the_whole_token_budget_then_runs_its_sampler(
    monkeypatch,
):
    """The GPU profile run's order: the dummy forward at the whole token budget, then (its _dummy_sampler_run) this
    engine's sampler on the forward's last hidden states (runner_patch.profile_sampler), then the CPU warm-up."""
    events = []

    @contextlib.contextmanager
    def settings(vllm_config):
        events.append(("settings", vllm_config))
        yield
        events.append("settings done")

    monkeypatch.setattr(cpu_model_runner, "_set_global_compilation_settings", settings)
    monkeypatch.setattr(
        cpu_patch,
        "profile_sampler",
        lambda runner, hidden: events.append(("our sampler", runner, hidden)),
    )
    monkeypatch.setenv(cpu_patch.CPU_PROFILE_SAMPLER, "1")
    for method in ("asymspec", "eagle"):
        events.clear()
        runner = types.SimpleNamespace(
            vllm_config=config(method),
            max_num_tokens=2048,
            _dummy_run=lambda n, **kw: (
                events.append(("dummy", n, kw)) or ("hidden", "last hidden")
            ),
        )
        cpu_patch.warming_up_model(lambda r: events.append(("warm-up", r)), runner)
        first = (
            [
                ("settings", runner.vllm_config),
                ("dummy", 2048, {"is_profile": True}),
                "settings done",
                ("our sampler", runner, "last hidden"),
            ]
            if method == "asymspec"
            else []
        )
        assert events == first + [("warm-up", runner)]


def test_the_patch_wraps_the_cpu_runner_once():
    cls = cpu_model_runner.CPUModelRunner
    names = ("__init__", "load_model", "warming_up_model")
    own = {n: cls.__dict__.get(n) for n in names}
    try:
        for n in names:
            unwrap(cls, n)
        stock_ = {n: cls.__dict__[n] for n in names}  # CPUModelRunner defines all three
        cpu_patch.patch_cpu_runner()
        patched = {n: cls.__dict__[n] for n in names}
        cpu_patch.patch_cpu_runner()
        for n in names:
            assert is_patched(patched[n]) and cls.__dict__[n] is patched[n]
            assert patched[n].__asymspec_original__ is stock_[n]
    finally:
        for n in names:
            setattr(cls, n, own[n])


def post(url: str, body: dict) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.vllm
@pytest.mark.slow
def test_vllms_own_server_with_the_plugin_serves_in_its_default_compiled_mode(tmp_path):
    """`python -m vllm.entrypoints.openai.api_server --model <verifier> --speculative-config '{"method": "asymspec",
    ...}'` as users start it (the plugin loads through its entry point; no --enforce-eager: the CPU platform
    compiles the verifier and the drafter with inductor's C++ backend, and the drafter's first trace died on
    inductor's bounds check, 4. in cpu_patch), on the embedded pair. One server: a greedy chat request is
    answered; a sampled one (no asymspec args) is refused on the CPU build with a 400 naming the fix (it was a
    bare 500: the workers failed it) and answered on a GPU."""
    import json
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    from asymspec_vl.pair.defaults import embedded_models
    from vllm_patches.version import is_cpu_build

    root = Path(__file__).resolve().parents[3]
    models = embedded_models()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = {
        "method": "asymspec",
        "model": models["drafter"],
        "num_speculative_tokens": 4,
    }
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            models["verifier"],
            "--speculative-config",
            json.dumps(spec),
            "--max-model-len",
            "1024",
            "--max-num-seqs",
            "2",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(
                tmp_path / "cache"
            ),  # compiled afresh, not read from an earlier run
            "PYTHONPATH": os.pathsep.join(
                [str(root), os.environ.get("PYTHONPATH", "")]
            ),
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 1200
        while server.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(5)
        text = (tmp_path / "server.log").read_text()
        assert server.poll() is None and time.monotonic() < deadline, text[-4000:]
        chat = {
            "model": models["verifier"],
            "messages": [{"role": "user", "content": "What is 6 + 6?"}],
            "max_tokens": 8,
        }
        status, body = post(url + "/v1/chat/completions", {**chat, "temperature": 0})
        assert status == 200 and body["choices"][0]["message"]["content"], body
        status, body = post(url + "/v1/chat/completions", chat)  # temperature 1
        if is_cpu_build():
            assert status == 400, body
            assert "rejection sampler" in body["error"]["message"], body
            assert "temperature=0" in body["error"]["message"], body
        else:
            assert status == 200, body
        assert "CppCompileError" not in (tmp_path / "server.log").read_text()
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_the_cpu_build_runs_our_profile_sampler_only_when_asked(monkeypatch):
    """The CPU build's KV cache is not sized by a profile: without ASYMSPEC_VL_CPU_PROFILE_SAMPLER=1 its warm-up
    skips the sampler pass (start-up time only), and still traces the whole budget first."""
    events = []

    @contextlib.contextmanager
    def settings(vllm_config):
        yield

    monkeypatch.setattr(cpu_model_runner, "_set_global_compilation_settings", settings)
    monkeypatch.setattr(
        cpu_patch, "profile_sampler", lambda runner, hidden: events.append("ours")
    )
    monkeypatch.delenv(cpu_patch.CPU_PROFILE_SAMPLER, raising=False)
    runner = types.SimpleNamespace(
        vllm_config=config("asymspec"),
        max_num_tokens=2048,
        _dummy_run=lambda n, **kw: events.append(("dummy", n)) or ("h", "last"),
    )
    cpu_patch.warming_up_model(lambda r: events.append("warm-up"), runner)
    assert events == [("dummy", 2048), "warm-up"]
    events.clear()
    monkeypatch.setenv(cpu_patch.CPU_PROFILE_SAMPLER, "1")
    cpu_patch.warming_up_model(lambda r: events.append("warm-up"), runner)
    assert events == [("dummy", 2048), "ours", "warm-up"]
