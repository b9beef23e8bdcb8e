"""`asymspec-vl doctor`'s drafter-graphs rows on the CPU build (the CPU platform's compilation of the drafter's
decode-shaped passes against the same engine's eager drafter): they pass, and they fail, without crashing, when
the compiled path is wrong; and the switch they use runs every pass eagerly when off."""

import pytest


@pytest.mark.vllm
@pytest.mark.timeout(1800)
def test_the_graphs_rows_pass_and_catch_a_fault_in_the_compiled_path(tmp_path, monkeypatch):
    """The compiled passes fed positions one off (a stale positions buffer): eager runs are untouched, so the
    tokens row and the a/b row fail with their counts."""
    from vllm_patches.drafter.drafter_graphs import DrafterGraphs
    from vllm_patches.probes import probe

    from asymspec_vl import AsymSpecVL
    from asymspec_vl.doctor.backends import DRAFTER_SIZES, RUNS, VERIFIER_SIZES
    from asymspec_vl.doctor.graphs import LOGITS, TOKENS, graphs_checks
    from asymspec_vl.toy.tiny import write_tiny_models

    paths = write_tiny_models(tmp_path, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES)
    run = next(r for r in RUNS if r.backend == "CPU_ATTN")
    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    vl = AsymSpecVL.from_pretrained(**names, backend="vllm", enforce_eager=False, **run.engine_kwargs())
    try:
        tokens, logits = graphs_checks(vl, run)
        assert (tokens.name, logits.name) == (TOKENS, LOGITS)
        assert tokens.result == "ok" and "6/6 requests equal" in tokens.detail, tokens
        assert "compiled, no CUDA graphs" in tokens.detail and " 0 passes compiled" not in tokens.detail, tokens
        assert logits.result == "ok" and "drafted on other tokens" not in logits.detail, logits
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
        assert probe.drafter_graphs(llm)["compiled"]  # switched back on after the eager run

        forward = DrafterGraphs.forward
        monkeypatch.setattr(DrafterGraphs, "forward", lambda self, token_ids, positions, *rest:
                            forward(self, token_ids, positions + 1, *rest))
        tokens, logits = graphs_checks(vl, run)
    finally:
        vl.backend.close()
    assert tokens.result == "failed" and "6/6" not in tokens.detail, tokens
    assert logits.result == "failed", logits


@pytest.mark.vllm
def test_the_rows_fail_on_an_engine_whose_drafter_is_eager(tmp_path):
    """No compiled pass to compare (the CPU build's default enforce_eager, no compiled backend given): both rows
    fail with the reason instead of comparing eager with eager; the switch refuses to turn graphs on."""
    from vllm_patches.probes import probe

    from asymspec_vl import AsymSpecVL
    from asymspec_vl.doctor.backends import RUNS
    from asymspec_vl.doctor.graphs import graphs_checks
    from asymspec_vl.toy.tiny import write_tiny_models

    paths = write_tiny_models(tmp_path)
    run = next(r for r in RUNS if r.backend == "CPU_ATTN")
    vl = AsymSpecVL.from_pretrained(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]),
                                    backend="vllm")
    try:
        checks = graphs_checks(vl, run)
        llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
        with pytest.raises(Exception, match="loaded eagerly"):
            probe.drafter_graphs(llm, True)
    finally:
        vl.backend.close()
    assert [c.result for c in checks] == ["failed", "failed"] and "runs eagerly" in checks[0].detail


def test_a_graphs_run_that_compiled_nothing_or_replayed_nothing_is_refused():
    from asymspec_vl.doctor.graphs import passes_problem

    none, some = {"compiled": 0, "replayed": 0}, {"compiled": 12, "replayed": 12}
    assert passes_problem(some, none, graphs=True) is None
    assert "no drafter pass ran compiled" in passes_problem(none, none, graphs=False)
    assert "ran compiled with the graphs off" in passes_problem(some, some, graphs=True)
    assert "none of 12 compiled passes replayed" in passes_problem({"compiled": 12, "replayed": 0}, none, True)
    assert passes_problem({"compiled": 12, "replayed": 0}, none, graphs=False) is None  # CPU: compiled, no graphs


# -- doctor --speed: bench_vllm's rows, the sized run skipped without CUDA ------------------------------------
BENCH_ROWS = [  # bench_vllm.json's rows (add_bounds ran): what the speed rows read
    {"mode": "eager", "method": "floor", "requests": 1, "tokens": 128, "seconds": 2.0, "tokens_per_s": 64.0,
     "x_floor": 1.0},
    {"mode": "eager", "method": "asymspec", "requests": 1, "tokens": 128, "seconds": 4.0, "tokens_per_s": 32.0,
     "x_floor": 0.5, "bound": 0.55, "mean_accepted_length": 2.5, "verifier_ms_per_step": 18.0,
     "base_pass_ms_per_step": 10.0, "gate_ms_per_step": 1.0, "draft_ms_per_step": 40.0},
    {"mode": "compiled", "method": "floor", "requests": 1, "tokens": 128, "seconds": 1.6, "tokens_per_s": 80.0,
     "x_floor": 1.0},
    {"mode": "compiled", "method": "asymspec", "requests": 1, "tokens": 128, "seconds": 0.8, "tokens_per_s": 160.0,
     "x_floor": 2.0, "bound": 2.2, "acceptance_rate": 0.75, "mean_accepted_length": 2.5, "verifier_ms_per_step": 16.0,
     "base_pass_ms_per_step": 1.5, "gate_ms_per_step": 0.5, "draft_ms_per_step": 6.0},
]


def test_the_speed_rows_show_the_split_tokens_per_s_and_the_bound_of_each_mode():
    from asymspec_vl.doctor.speed import speed_rows

    rows = {c.name: c for c in speed_rows(BENCH_ROWS, "sized", "graphs")}
    assert rows["speed: floor, drafter graphs"].detail.startswith("80.0 tokens/s")
    split = rows["speed: asymspec, drafter graphs"].detail
    assert "160.0 tokens/s" in split and "verifier 16.00, x_comp pass 1.50, gate 0.50, x_full drafting 6.00" in split
    graphs = rows["speed: asymspec / floor, drafter graphs"].detail
    assert graphs.startswith("2.00x the Floor's tokens/s (bound 2.20x); measured at acceptance 0.75, mean accepted "
                             "length 2.50 (random weights accept nearly every draft: the cost side"), graphs
    assert graphs.endswith("at your mean accepted length L: speed-up ~= 2.00 * L / 2.50 = 0.800 * L"), graphs
    eager = rows["speed: asymspec / floor, drafter eager"].detail
    assert eager.startswith("0.50x the Floor's tokens/s (bound 0.55x); measured at mean accepted length 2.50"), eager
    assert eager.endswith("speed-up ~= 0.50 * L / 2.50 = 0.200 * L"), eager
    assert {c.result for c in rows.values()} == {"ok"}


def test_without_cuda_the_sized_run_is_skipped_and_the_tiny_pair_runs(monkeypatch):
    from asymspec_vl.doctor import speed

    ran = []
    monkeypatch.setattr(speed, "bench_checks", lambda args, label, mode: ran.append((args, mode)) or [])
    sized, = speed.speed_checks(False, "cpu")
    assert sized.result == "skipped" and sized.detail.startswith("needs a CUDA GPU (vLLM platform here: cpu)")
    assert ran[0][0][:2] == ["--models", "tiny"] and ran[0][1] == "compiled"
    ran.clear()
    assert speed.speed_checks(True, "cuda", "8b") == []
    assert ran[0][0][:6] == ["--models", "sized", "--drafter-size", "2b", "--verifier-size", "8b"]
    assert ran[0][1] == "graphs"


def test_a_bench_run_that_fails_is_a_failed_row_with_its_reason():
    from asymspec_vl.doctor.speed import bench_checks

    failed, = bench_checks(["--models", "no-such-models"], "x", "compiled")
    assert failed.result == "failed" and "exit 2" in failed.detail and "invalid choice" in failed.detail, failed


@pytest.mark.vllm
@pytest.mark.timeout(1200)
def test_the_sized_row_runs_end_to_end_with_random_weights_at_a_cpu_stand_in_size():
    """doctor --speed's sized row, unmocked: bench_vllm writes config-only folders (no weights) and vLLM's dummy
    loader fills them; "mini" shapes stand in for 2b / 32b on the CPU (issue 32: it exited 1, 'has no weights')."""
    from asymspec_vl.doctor.speed import sized_checks

    rows = {c.name: c for c in sized_checks("mini", "mini", requests=1, tokens=6, compiled_name="compiled")}
    assert not [c for c in rows.values() if c.failed], rows
    assert {"speed: floor, drafter eager", "speed: asymspec, drafter compiled",
            "speed: asymspec / floor, drafter compiled"} <= set(rows), sorted(rows)
    assert {c.backend for c in rows.values()} == {"sized: drafter mini, verifier mini"}


@pytest.mark.vllm
@pytest.mark.timeout(1800)
def test_the_eager_run_reads_no_prompt_kv_the_compiled_run_wrote(tmp_path, monkeypatch):
    """The graphs rows' two runs share one engine: its prefix cache is reset before each, so the eager run
    computes its own prompt KV instead of reusing what the compiled passes wrote (which would hide their damage;
    issue 32, finding 6). Counted where vLLM's scheduler looks the prefix cache up (the CPU build's engine core
    runs in this process)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    from asymspec_vl import AsymSpecVL
    from asymspec_vl.doctor.backends import DRAFTER_SIZES, RUNS, VERIFIER_SIZES
    from asymspec_vl.doctor.cases import requests
    from asymspec_vl.doctor.graphs import graphs_checks
    from asymspec_vl.toy.tiny import write_tiny_models

    hits, lookup = [], KVCacheManager.get_computed_blocks

    def counted_lookup(self, request):
        blocks, tokens = lookup(self, request)
        hits.append(tokens)
        return blocks, tokens

    monkeypatch.setattr(KVCacheManager, "get_computed_blocks", counted_lookup)
    paths = write_tiny_models(tmp_path, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES)
    run = next(r for r in RUNS if r.backend == "CPU_ATTN")
    vl = AsymSpecVL.from_pretrained(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]),
                                    backend="vllm", enforce_eager=False, **run.engine_kwargs())
    per_run, generate = [], vl.generate_batch

    def counted(*args, **kwargs):
        hits.clear()
        out = generate(*args, **kwargs)
        per_run.append((len(hits), sum(hits)))
        return out

    try:
        generate(requests(), "asymspec", {"K": 2, "max_new_tokens": 4})  # the cache holds these prompts now
        cold = sum(hits)  # on an empty cache: only the blocks the 6 prompts share with each other (chat template)
        hits.clear()
        generate(requests(), "asymspec", {"K": 2, "max_new_tokens": 4})
        assert sum(hits) > cold, "a warm cache must give more hits, or this test cannot tell the runs apart"
        vl.generate_batch = counted
        checks = graphs_checks(vl, run)
    finally:
        vl.backend.close()
    assert len(per_run) == 2 and all(lookups for lookups, _ in per_run), per_run
    assert [tokens for _, tokens in per_run] == [cold, cold], (per_run, cold)  # as on an empty cache
    assert [c.result for c in checks] == ["ok", "ok"], checks
