"""The vLLM path as GPU users run it, checked on the CPU build where vLLM's code allows: attention metadata
planned for the drafter's own heads, a bounded engine cache with one speculative engine for every K, named
worker RPCs under multiprocessing, compiled mode, tensor-parallel fault agreement, the x_full pool laid out
once the KV cache config is final, memory bounds (chunked x_full prefill, the vision tower and the sampler
profiled)."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import random_request, runner_of, summary

pytestmark = pytest.mark.vllm


# -- 1. the drafter's attention metadata is planned for the drafter's heads ------------------------
@pytest.fixture(scope="module")
def uneven_heads(tmp_path_factory):
    """A verifier with 4 query heads and a VL drafter with 2 (one KV head each: the two share vLLM's KV cache
    group and attention group, as Qwen3-32B's 64 / 8 and Qwen3-VL-2B's 16 / 8 do)."""
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.toy.tiny import TinySizes, write_tiny_models

    paths = write_tiny_models(
        tmp_path_factory.mktemp("uneven-heads"),
        seed=7,
        verifier_sizes=TinySizes(heads=4, kv_heads=1),
    )
    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(**names, device="cpu")
    vl = AsymSpecVL.from_pretrained(**names, backend="vllm", block_size=16)
    yield hf, vl
    vl.backend.close()


def test_drafter_attention_is_planned_for_the_drafters_heads(uneven_heads):
    """vLLM plans attention metadata with the engine's (verifier's) head counts; the CPU backend, like FA3's AOT
    scheduler and FlashInfer, bakes them into a per-step plan. The drafter's passes plan their own."""
    from asymspec_vl import AsymSpecConfig

    hf, vl = uneven_heads
    reqs = [random_request(s) for s in range(6)]
    for method in (
        "asymspec",
        "scd",
    ):  # asymspec: x_full and x_comp passes; scd: x_comp drafting and scoring
        cfg = AsymSpecConfig(K=2, max_new_tokens=16)
        assert summary(vl.generate_batch(reqs, method, cfg)) == summary(
            hf.generate_batch(reqs, method, cfg)
        ), method
    runner = runner_of(vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0]))
    assert {
        g.get_metadata_builder().num_heads for g in runner.drafter.draft_attn_groups
    } == {2}
    assert {
        g.get_metadata_builder().num_heads
        for groups in runner.attn_groups
        for g in groups
    } == {4}


def test_drafter_layers_never_read_the_verifiers_metadata(uneven_heads):
    """In every step the x_comp pass runs right after the verifier's forward, on the same tokens: its layers get
    metadata objects of their own, never the ones the verifier's layers read."""
    from vllm.forward_context import get_forward_context

    from asymspec_vl import AsymSpecConfig

    hf, vl = uneven_heads
    runner = runner_of(vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0]))
    drafter_layer = sorted(runner.drafter._draft_attn_layer_names)[0]
    verifier_layer = next(
        n
        for gs in runner.attn_groups
        for g in gs
        for n in g.layer_names
        if n not in runner.drafter._draft_attn_layer_names
    )
    by_verifier, by_drafter = [], []
    hooks = [
        runner.model.register_forward_pre_hook(
            lambda m, a: by_verifier.append(
                get_forward_context().attn_metadata[verifier_layer]
            )
        ),
        runner.drafter.model.register_forward_pre_hook(
            lambda m, a: by_drafter.append(
                get_forward_context().attn_metadata[drafter_layer]
            )
        ),
    ]
    try:
        vl.generate_batch(
            [random_request(s) for s in range(3)],
            "asymspec",
            AsymSpecConfig(K=2, max_new_tokens=8),
        )
    finally:
        for h in hooks:
            h.remove()
    assert by_verifier and by_drafter
    assert not any(d is v for d in by_drafter for v in by_verifier)


# -- 2. a bounded engine cache; one speculative engine serves every K --------------------------------
def test_engine_cache_shuts_the_previous_engine_down_before_the_next_starts(
    monkeypatch,
):
    from asymspec_vl.backends.vllm import engine as ve

    events = []
    monkeypatch.setattr(
        ve, "shutdown_engine", lambda llm: events.append(("shutdown", llm))
    )
    monkeypatch.setattr(
        ve, "_release_process_memory", lambda: events.append(("release",))
    )
    cache = ve.EngineCache(
        lambda spec: events.append(("build", spec)) or spec, capacity=1
    )
    floor = ve.EngineSpec("verifier")
    k2 = ve.EngineSpec(
        "verifier", "drafter", cache.speculative_K("verifier", "drafter", 2)
    )
    assert k2.K == ve.DEFAULT_SPEC_TOKENS
    cache.get(floor)
    cache.get(k2)
    assert events == [
        ("build", floor),
        ("shutdown", floor),
        ("release",),
        ("build", k2),
    ]
    assert (
        cache.speculative_K("verifier", "drafter", 3) == k2.K
    )  # served by the live engine
    k6 = ve.EngineSpec(
        "verifier", "drafter", cache.speculative_K("verifier", "drafter", 6)
    )
    assert k6.K == 6
    events.clear()
    cache.get(k6)  # a larger K restarts the speculative engine once ...
    assert events == [("shutdown", k2), ("release",), ("build", k6)]
    assert (
        cache.speculative_K("verifier", "drafter", 2) == 6
    )  # ... and smaller ones never shrink it back
    two = ve.EngineCache(lambda spec: spec, capacity=2)
    for spec in (floor, k6, ve.EngineSpec("drafter", images=True)):
        two.get(spec)
    assert list(two.live) == [
        k6,
        ve.EngineSpec("drafter", images=True),
    ]  # the least recently used went


def test_changing_method_and_K_starts_each_engine_once(tiny_models, tiny_vl):
    """The demo's K slider and a multi-method eval: every K and method, at most two engines live (CPU), three
    engines started in all (verifier, drafter, speculative), tokens unchanged at a K below the engine's."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from asymspec_vl.core.methods import engine_order

    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
    )
    built, build = [], vl.backend.engines.build
    vl.backend.engines.build = lambda spec: built.append(spec) or build(spec)
    reqs = [random_request(s) for s in range(3)]
    try:
        for method, K in (
            ("floor", 2),
            ("asymspec", 1),
            ("drafter", 2),
            ("asymspec", 3),
            ("scd", 2),
            ("sd", 4),
            ("asymspec", 4),
        ):
            cfg = AsymSpecConfig(K=K, max_new_tokens=10)
            got = vl.generate_batch(reqs, method, cfg)
            assert len(vl.backend.engines.live) <= 2
            if method == "asymspec" and K == 3:
                assert summary(got) == summary(
                    tiny_vl.generate_batch(reqs, method, cfg)
                )
        assert (
            len(built) == len(set(built)) == 3
        )  # verifier, speculative (K=4, serving K=1..4), drafter
        assert engine_order(["floor", "asymspec", "drafter", "sd", "scd"]) == [
            "floor",
            "sd",
            "asymspec",
            "scd",
            "drafter",
        ]  # one engine each; sd first (it may have its own)
    finally:
        vl.backend.close()


def test_a_closed_engine_releases_its_model_and_kv_cache(tiny_models):
    """An evicted or closed in-process engine leaves no vLLM model behind (vLLM's memoized signature checks held
    the model, its attention layers and their KV cache for the life of the process)."""
    import gc

    import torch

    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    def vllm_models() -> list[str]:
        gc.unfreeze()  # vLLM freezes the heap after start-up: frozen objects are not listed
        return [
            type(o).__name__
            for o in gc.get_objects()
            if isinstance(o, torch.nn.Module)
            and type(o).__module__.startswith("vllm.model_executor.models")
            and type(o).__name__.endswith(("ForCausalLM", "ForConditionalGeneration"))
        ]

    gc.collect()
    before = vllm_models()
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
    )
    try:
        vl.generate_batch(
            [random_request(0)], "floor", AsymSpecConfig(max_new_tokens=3)
        )
        assert len(vllm_models()) > len(before)
    finally:
        vl.backend.close()
    del vl
    gc.collect()
    assert vllm_models() == before


# -- 3. no pickled functions: named worker RPCs work with multiprocessing --------------------------
MULTIPROC_SCRIPT = """
import json, os, sys
sys.path[:0] = [os.path.dirname({tests!r})]  # the repository first: tests/vllm_patches/ must not shadow the package
sys.path.append({tests!r})
from helpers import random_request
from vllm_patches.probes import probe
from asymspec_vl import AsymSpecConfig, AsymSpecVL
if __name__ == "__main__":
    vl = AsymSpecVL.from_pretrained(drafter={drafter!r}, verifier={verifier!r}, backend="vllm")
    reqs = [random_request(s) for s in range(3)]
    cfg = AsymSpecConfig(K=2, max_new_tokens=10)
    out = {{m: [r.token_ids for r in vl.generate_batch(reqs, m, cfg)] for m in ("drafter", "asymspec")}}
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    out["counters"] = probe.counters(llm)
    probe.start_timing(llm)
    vl.generate_batch(reqs[:1], "asymspec", cfg)
    out["timing"] = probe.stop_timing(llm)
    vl.backend.close()
    print("RESULT " + json.dumps(out))
"""


@pytest.mark.timeout(1200)  # its subprocess may take up to 900 s
def test_drafter_alone_probe_and_asymspec_run_with_multiprocessing(
    tiny_models, tiny_vl, tmp_path
):
    """The GPU default: engine core and workers in their own processes, insecure serialization off. The
    drafter-alone baseline's image embeddings and the probe go through named worker methods."""
    from asymspec_vl import AsymSpecConfig

    script = tmp_path / "multiproc.py"
    script.write_text(
        MULTIPROC_SCRIPT.format(
            tests=str(Path(__file__).parents[2]),
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(tiny_models["verifier"]),
        )
    )
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
    run = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(line[0][len("RESULT ") :])
    reqs = [random_request(s) for s in range(3)]
    cfg = AsymSpecConfig(K=2, max_new_tokens=10)
    for method in ("drafter", "asymspec"):
        assert got[method] == [
            r.token_ids for r in tiny_vl.generate_batch(reqs, method, cfg)
        ], method
    assert (
        got["counters"]["vision_tower_calls"] == 3 and got["counters"]["engine_K"] >= 2
    )
    assert got["timing"]["steps"] > 0 and got["timing"]["seconds"]["verifier"] > 0


# -- 4. compiled mode ------------------------------------------------------------------------------
def test_asymspec_with_the_cpu_platforms_default_compilation(tiny_models, tiny_vl):
    """enforce_eager=False: vLLM's CPU default (torch.compile with inductor, traced once with its guards
    dropped) for the verifier and for the drafter's decode-shaped passes (the x_comp scoring pass, the x_full
    passes after a step's first, sd's x_comp drafting passes; drafter_graphs.py). Tokens, sources and step
    counts equal the same engine's with its drafter eager, and the transformers backend's."""
    from vllm.config import CompilationMode

    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        enforce_eager=False,
    )
    reqs = [random_request(s) for s in range(4)]
    try:
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
        assert (
            llm.llm_engine.vllm_config.compilation_config.mode
            == CompilationMode.DYNAMO_TRACE_ONCE
        )
        graphs = runner_of(llm).drafter.graphs
        assert graphs.enabled
        compiled = []  # token counts of the passes that ran compiled
        forward = graphs.forward
        graphs.forward = lambda ids, *a: (
            compiled.append(ids.shape[0]) or forward(ids, *a)
        )
        for method, cfg in (
            ("asymspec", AsymSpecConfig(K=2, max_new_tokens=12, bonus="fused")),
            ("sd", AsymSpecConfig(K=2, max_new_tokens=12)),
        ):
            compiled.clear()
            got = summary(vl.generate_batch(reqs, method, cfg))
            assert compiled and min(compiled) <= len(reqs), (
                method
            )  # one-token-a-row passes ran compiled
            graphs.enabled = False  # the same engine, every drafter pass eager
            try:
                eager = summary(vl.generate_batch(reqs, method, cfg))
            finally:
                graphs.enabled = True
            assert got == eager == summary(tiny_vl.generate_batch(reqs, method, cfg)), (
                method,
                cfg.K,
            )
    finally:
        vl.backend.close()


def test_a_compiled_drafter_first_traced_at_the_whole_budget_reads_the_right_mrope_positions(
    tiny_models, tiny_vl
):
    """On a GPU the drafter's first compiled call is the profile run at max_num_batched_tokens tokens: Dynamo
    then traces the whole positions buffer, and a (3, N) buffer would be contiguous there, its row stride baked
    in for every shorter pass (wrong H and W rows). Here the CPU warm-up is made to trace at the whole budget
    (max_num_seqs == max_num_batched_tokens) as the GPU's profile run does: tokens equal the transformers
    backend's on the embedded-shaped tiny pair, image requests among them (their H, W rows differ from T)."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    budget = 64
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        enforce_eager=False,
        max_num_seqs=budget,
        max_num_batched_tokens=budget,
    )
    reqs = [random_request(s) for s in range(6)]
    try:
        graphs = runner_of(
            vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
        ).drafter.graphs
        assert (
            graphs.enabled and graphs.positions.shape[-1] > budget
        )  # vLLM's (3, N + 1) layout
        for method in ("asymspec", "scd"):
            cfg = AsymSpecConfig(K=2, max_new_tokens=12)
            assert summary(vl.generate_batch(reqs, method, cfg)) == summary(
                tiny_vl.generate_batch(reqs, method, cfg)
            ), method
    finally:
        vl.backend.close()


def test_the_cpu_warm_up_first_traces_the_whole_budget_as_the_gpu_profile_run(
    tiny_models, monkeypatch
):
    """The GPU's first compiled call is the profile run at max_num_batched_tokens; the CPU build's warm-up alone
    traces at min(max(16, max_num_seqs), budget). vllm_patches/hooks/cpu_patch.py runs the profile run's pass
    first, so every compiled CPU engine is traced at the GPU's shapes (verifier and drafter)."""
    from asymspec_vl import AsymSpecVL
    from vllm_patches.drafter.proposer import AsymSpecProposer

    sizes = []
    dummy_run = AsymSpecProposer.dummy_run
    monkeypatch.setattr(
        AsymSpecProposer,
        "dummy_run",
        lambda self, n, *a, **k: sizes.append(n) or dummy_run(self, n, *a, **k),
    )
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        enforce_eager=False,
        max_num_seqs=4,
        max_num_batched_tokens=96,
    )
    try:
        vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    finally:
        vl.backend.close()
    assert sizes[:2] == [96, 16], (
        sizes
    )  # the profile run's whole budget first, then the CPU warm-up's size


def test_the_profile_run_executes_our_sampler_at_max_num_seqs_rows(
    tiny_models, tiny_vl, monkeypatch
):
    """vLLM sizes the KV cache from the peak of its profile run, which samples with vLLM's own sampler only: the
    run executes this engine's sampler too (runner_patch.dummy_sampler_run) at max_num_seqs dummy rows with the
    engine's K drafts each, the verifier's vocabulary and the drafter's, every rule of sampler_profile.PROFILED.
    Checked twice: at start-up (the CPU warm-up's profile pass, cpu_patch.py) and through GPUModelRunner.profile_run
    itself on the CPU runner (vLLM's rejection-sampler kernel, which needs the GPU build, stubbed): after the dummy
    forward at the whole token budget, in the profile run's order. No request state is left, and the engine then
    serves the transformers backend's tokens."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from vllm_patches import sampler_profile

    events = []
    dummy_step, dummy_run = sampler_profile.dummy_step, GPUModelRunner._dummy_run

    def recorded_step(method, samples, logits, n, vocab_d, *args):
        out = dummy_step(method, samples, logits, n, vocab_d, *args)
        events.append(
            ("ours", method, samples, tuple(logits.shape), n, vocab_d, args[2])
            + (tuple(out.sampled_token_ids.shape), out.logprobs_tensors is not None)
        )
        return out

    def recorded_run(runner, num_tokens, *args, **kwargs):
        events.append(("forward", num_tokens, kwargs.get("is_profile", False)))
        return dummy_run(runner, num_tokens, *args, **kwargs)

    monkeypatch.setattr(sampler_profile, "dummy_step", recorded_step)
    monkeypatch.setattr(GPUModelRunner, "_dummy_run", recorded_run)
    # the CPU warm-up's sampler pass, as the GPU's profile run always runs it
    monkeypatch.setenv("ASYMSPEC_VL_CPU_PROFILE_SAMPLER", "1")
    seqs, budget, K = 5, 64, 2
    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
    )
    try:
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", K)[0])
        runner = runner_of(llm)
        vocab_v = runner.model_config.get_vocab_size()
        vocab_d = runner.drafter.full.draft_logits.logits.shape[-1]
        engine_K = runner.speculative_config.num_speculative_tokens  # serves every K
        assert engine_K >= K and budget >= seqs * (engine_K + 1)
        ours = [
            ("ours", m, s, (seqs * (engine_K + 1), vocab_v), engine_K, vocab_d)
            + (runner.model_config.max_logprobs, (seqs, engine_K + 1), True)
            for m, s, _ in sampler_profile.PROFILED
        ]
        assert events[: 1 + len(ours)] == [("forward", budget, True), *ours], events
        events.clear()
        monkeypatch.setattr(runner, "rejection_sampler", lambda *a, **k: None)
        runner.profile_run()  # vLLM's, as the GPU worker calls it before sizing the KV cache
        assert events == [("forward", budget, True), *ours], events
        assert not runner.requests and runner.input_batch.num_reqs == 0
        assert not runner.drafter.registry.rows
        assert not runner.drafter.full.draft_logits.slots
        reqs = [random_request(s) for s in range(3)]
        for cfg in (
            AsymSpecConfig(K=K, max_new_tokens=8),
            AsymSpecConfig(K=K, max_new_tokens=8, temperature=0.8, seed=3),
        ):
            assert summary(vl.generate_batch(reqs, "asymspec", cfg)) == summary(
                tiny_vl.generate_batch(reqs, "asymspec", cfg)
            )
    finally:
        vl.backend.close()


# -- 5. tensor-parallel faults: ranks agree or the engine stops -----------------------------------
def test_a_rank_local_device_error_is_a_request_error_only_without_tensor_parallelism():
    """(How ranks compare their failed requests: tests/vllm_patches/requests/test_faults.py, on two real gloo ranks.)"""
    from asymspec_vl.core.errors import AsymSpecError
    from vllm_patches.requests.faults import request_errors

    assert issubclass(torch.OutOfMemoryError, request_errors(1))
    assert not issubclass(torch.OutOfMemoryError, request_errors(2)) and request_errors(
        2
    ) == (AsymSpecError,)


def test_a_vision_tower_error_fails_the_request_alone_only_without_tensor_parallelism():
    """One rank's out-of-memory in the vision tower: with one rank the request fails alone and the batch goes
    on; with two it propagates (the worker raises and vLLM stops every worker) instead of being caught on one
    rank while the other waits in the vision tower's collective."""
    from asymspec_vl.core.sources import RowLedger
    from vllm_patches.drafter.full_view import FullRow, FullView
    from vllm_patches.drafter.proposer import AsymSpecProposer, DraftPlan
    from vllm_patches.requests.faults import request_errors
    from vllm_patches.requests.request_args import EngineFacts
    from vllm_patches.requests.rows import RowState

    class Images:
        def embeddings(self, req_id):
            if req_id == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            return (torch.ones(2, 4),)

    failed = {}
    for world_size in (1, 2):
        proposer = AsymSpecProposer.__new__(AsymSpecProposer)
        proposer.full = FullView(Images(), None)
        proposer.full.drafter = types.SimpleNamespace(
            request_errors=request_errors(world_size),
            facts=EngineFacts(K=2, vocab_size=10, max_model_len=64, image_token_id=7),
        )
        proposer.fail = lambda req_id, state, err, world_size=world_size: (
            failed.setdefault(world_size, []).append(req_id)
        )
        rows = [(r, RowState(None, 2), [1, 7, 7, 2]) for r in ("ok", "oom", "ok2")]
        for r, _, feed in rows:
            proposer.full.rows[r] = FullRow(
                RowLedger(prompt=feed), torch.arange(4), 0, sees_image=True
            )
        plan = DraftPlan(list(rows), [])
        # the vision tower runs as the x_full prefill reaches each row (full_view_images.py, admit)
        images = proposer.full.images_for(plan, proposer.fail)
        if world_size == 1:
            assert [images.admit(r) for r in range(3)] == [True, False, True]
            assert sorted(images.held) == [0, 2] and images.peak == 4
        else:
            with pytest.raises(torch.OutOfMemoryError):
                [images.admit(r) for r in range(3)]
    assert failed == {1: ["oom"]}


TP2_SCRIPT = """
import json, os, sys, time
sys.path[:0] = [os.path.dirname({tests!r})]  # the repository first: tests/vllm_patches/ must not shadow the package
sys.path.append({tests!r})
import torch
from helpers import random_request
from asymspec_vl import AsymSpecConfig, AsymSpecVL


def fail_on_rank_1(worker):  # test-only: sent as a function, hence VLLM_ALLOW_INSECURE_SERIALIZATION below
    if worker.rank == 1:
        def oom(req_id):
            raise torch.OutOfMemoryError("simulated CUDA out of memory in the vision tower on rank 1")
        worker.model_runner.drafter.full.images.embeddings = oom
    return worker.rank


def communicator(worker):  # the TP group's device communicator: shared memory (AVX-512 CPUs) or torch.distributed
    from vllm.distributed import get_tp_group
    dist = get_tp_group().device_communicator.dist_module
    return getattr(dist, "__name__", type(dist).__name__)


if __name__ == "__main__":
    vl = AsymSpecVL.from_pretrained(drafter={drafter!r}, verifier={verifier!r}, backend="vllm",
                                    tensor_parallel_size=2)
    cfg = AsymSpecConfig(K=2, max_new_tokens=10)
    out = {{"tokens": [r.token_ids for r in vl.generate_batch([random_request(s) for s in range(3)], "asymspec", cfg)]}}
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    out["communicator"] = llm.collective_rpc(communicator)
    out["ranks"] = llm.collective_rpc(fail_on_rank_1)
    start = time.time()
    try:
        vl.generate_batch([random_request(9)], "asymspec", cfg)
        out["after_fault"] = "completed"
    except Exception as e:
        out["after_fault"] = type(e).__name__ + ": " + str(e)[:300]
    out["seconds"] = time.time() - start
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
"""


@pytest.mark.timeout(1200)  # its subprocess may take up to 900 s
def test_tensor_parallel_engine_agrees_and_stops_loudly_on_a_rank_local_fault(
    tiny_models, tiny_vl, tmp_path, record_property
):
    """TP=2 on the CPU build (its shared-memory communicator on AVX-512 CPUs, torch.distributed's gloo on the
    others: the test reports which served it): AsymSpec's tokens equal the transformers backend's (the ranks
    compare their failed requests every step); then an out-of-memory in the vision tower on rank 1 only stops the
    engine with
    an error within seconds, where catching it on that rank alone left rank 0 waiting in the vision tower's
    collective."""
    from asymspec_vl import AsymSpecConfig

    script = tmp_path / "tp2.py"
    script.write_text(
        TP2_SCRIPT.format(
            tests=str(Path(__file__).parents[2]),
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(tiny_models["verifier"]),
        )
    )
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        "HF_HUB_OFFLINE": "1",
    }
    try:
        run = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"the TP=2 engine hung after a rank-local fault: {(e.stderr or b'')[-2000:]!r}"
        )
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(line[0][len("RESULT ") :])
    record_property("tp_communicator", got["communicator"])
    print(f"TP=2 served by the {got['communicator'][0]} communicator")
    reqs = [random_request(s) for s in range(3)]
    assert got["tokens"] == [
        r.token_ids
        for r in tiny_vl.generate_batch(
            reqs, "asymspec", AsymSpecConfig(K=2, max_new_tokens=10)
        )
    ]
    assert sorted(got["ranks"]) == [0, 1]
    assert got["after_fault"] != "completed" and got["seconds"] < 150, (
        got
    )  # the old code: 300 s (vLLM's step timeout)
    assert "out of memory in the vision tower on rank 1" in run.stdout + run.stderr


# -- 6. latent: the x_full pool once the KV cache config is final; V2 runner refused ---------------
def test_full_view_pool_is_laid_out_in_the_kernels_block_size(monkeypatch):
    """The pool takes the block size the drafter's attention kernels index (a divisor of the KV manager's, as
    vLLM splits blocks for backends that need smaller ones) and the capacity in the scheduler's blocks; its
    memory, reserved while the drafter loads, covers it."""
    import types

    from vllm_patches.drafter.full_view_pool import FullViewPool, reserve_bytes

    class Backend:
        @staticmethod
        def get_kv_cache_shape(
            num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"
        ):
            return (2, num_blocks, block_size, num_kv_heads, head_size)

    class Layer:
        def get_attn_backend(self):
            return Backend

        def get_kv_cache_spec(self, vllm_config):
            bs = vllm_config.cache_config.block_size
            return types.SimpleNamespace(
                num_kv_heads=2,
                head_size=8,
                dtype=torch.float32,
                block_size=bs,
                real_page_size_bytes=2 * bs * 2 * 8 * 4,
            )

    monkeypatch.setenv("ASYMSPEC_FULL_VIEW_TOKENS", "200")
    config = types.SimpleNamespace(
        cache_config=types.SimpleNamespace(block_size=32, cache_dtype="auto"),
        scheduler_config=types.SimpleNamespace(max_num_seqs=4),
        model_config=types.SimpleNamespace(max_model_len=64),
    )
    layers = {"draft.0": Layer(), "draft.1": Layer()}
    reserved = reserve_bytes(layers, config, torch.device("cpu"))
    pool = FullViewPool(layers, config, torch.device("cpu"), kernel_block_size=16)
    assert (
        pool.block_size == 16 and pool.num_blocks == 7 * 2 + 1
    )  # ceil(200 / 32) scheduler blocks, in halves
    assert pool.tensors["draft.0"].shape == (2, 15, 16, 2, 8)
    assert (
        sum(t.numel() * t.element_size() for t in pool.tensors.values())
        <= reserved.numel()
    )
    assert len(pool.reserve("r", 33)) == 3
    with pytest.raises(ValueError, match="does not divide"):
        FullViewPool(layers, config, torch.device("cpu"), kernel_block_size=24)


def test_v2_model_runner_is_refused(tiny_models, monkeypatch):
    import vllm.envs as envs
    from vllm.engine.arg_utils import EngineArgs

    import vllm_patches

    vllm_patches.apply()
    monkeypatch.setattr(envs, "VLLM_USE_V2_MODEL_RUNNER", True, raising=False)
    args = EngineArgs(
        model=str(tiny_models["verifier"]),
        max_model_len=1024,
        speculative_config={
            "method": "asymspec",
            "model": str(tiny_models["vl_drafter"]),
            "num_speculative_tokens": 2,
        },
    )
    with pytest.raises(ValueError, match="VLLM_USE_V2_MODEL_RUNNER"):
        args.create_engine_config()


def test_asymspec_engines_get_the_worker_extension(tiny_models):
    """Direct LLM(...) / `vllm serve` users get the named worker methods without asking."""
    from vllm.engine.arg_utils import EngineArgs

    import vllm_patches
    from vllm_patches.hooks.worker_extension import WORKER_EXTENSION

    vllm_patches.apply()
    spec = {
        "method": "asymspec",
        "model": str(tiny_models["vl_drafter"]),
        "num_speculative_tokens": 2,
    }
    config = EngineArgs(
        model=str(tiny_models["verifier"]), max_model_len=1024, speculative_config=spec
    ).create_engine_config()
    assert config.parallel_config.worker_extension_cls == WORKER_EXTENSION
    assert (
        not config.speculative_config.enforce_eager
    )  # the drafter compiles where the verifier does
    eager = EngineArgs(
        model=str(tiny_models["verifier"]),
        max_model_len=1024,
        speculative_config={**spec, "enforce_eager": True},
    ).create_engine_config()
    assert (
        eager.speculative_config.enforce_eager
    )  # the switch that keeps every drafter pass eager
    mine = EngineArgs(
        model=str(tiny_models["verifier"]),
        max_model_len=1024,
        speculative_config=spec,
        worker_extension_cls="my.Extension",
    ).create_engine_config()
    assert mine.parallel_config.worker_extension_cls == "my.Extension"
