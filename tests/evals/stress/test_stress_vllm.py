"""The differential stress test of the vLLM path, CI-sized (the long run: `python -m asymspec_vl.evals.stress`).

Each case is one asymspec engine serving a seeded random mix of asymspec, sd, scd, floor and plain rows (each
with its own K below the engine's, answer budget and stop tokens, image or text-only, arriving while others
run, so rows finish and their batch rows are reused); every request must equal the same request decoded alone
on the transformers backend (tokens, sources, finish, step counts), and the drafter's logits a and b at its
verification steps must equal the transformers drafter's on the same tokens (reference.LOGIT_TOLERANCE).
The engines below cover the CPU build's two attention kernels (block sizes 16 and 48: "vec16"; 32 and 128:
"vec"), chunked prefills, prefix caching on and off, forced preemption, a small x_full pool and TP=2 with
worker processes, and a GPU-shaped engine (compiled, first traced at the whole budget, seeded sampled rows in
chunked prefills), and a cross-family case (the embedded pair embedded-llama: two vocabularies, seeded sampled
rows beside greedy ones, its refused rows skipped); the long run draws every axis at random."""

import pytest
from asymspec_vl.evals.stress.workload import MODES, EngineCase, draw

CI_CASES = {  # seed -> the engine its rows run on
    18: EngineCase(
        block_size=16,
        K=4,
        max_num_seqs=4,
        max_num_batched_tokens=32,
        prefix_caching=True,
        preempt=True,
    ),
    2: EngineCase(
        block_size=48, K=3, max_num_seqs=3, prefix_caching=False, small_pool=True
    ),
    3: EngineCase(
        block_size=128,
        K=5,
        max_num_seqs=6,
        max_num_batched_tokens=64,
        prefix_caching=True,
    ),
    4: EngineCase(
        block_size=32, K=2, max_num_seqs=2, prefix_caching=True, tp=2, processes=True
    ),
    # GPU-shaped (issue 32): compiled and first traced at the whole budget, seeded sampled rows in chunked prefills
    5: EngineCase(
        block_size=16,
        K=3,
        max_num_seqs=4,
        max_num_batched_tokens=48,
        prefix_caching=True,
        compiled=True,
    ),
}
GPU_SHAPED = {5}
MAX_ROWS, MAX_NEW = 9, 24


def ci_workload(seed):
    return draw(
        seed,
        max_rows=MAX_ROWS,
        engine=CI_CASES[seed],
        max_new=MAX_NEW,
        gpu_shaped=seed in GPU_SHAPED,
    )


def test_ci_cases_cover_every_stress_axis():
    axes = set().union(*(ci_workload(seed).axes() for seed in CI_CASES))
    required = {f"mode={m}" for m in MODES} | {
        "image",
        "text",
        "K_below_engine",
        "rows_reused",
        "mixed_methods",
        "chunked_prefill",
        "preemption",
        "small_pool",
        "processes",
        "tp=2",
        "prefix_caching=True",
        "prefix_caching=False",
        "compiled",
        "sampled",
    }
    assert required <= axes, sorted(required - axes)
    assert {16, 32, 48, 128} <= {case.block_size for case in CI_CASES.values()}


def test_workloads_round_trip_and_shrink_to_what_fails():
    """A mismatch prints its workload (JSON); --shrink keeps only the rows and engine settings the failure needs."""
    import dataclasses

    from asymspec_vl.evals.stress.case import CaseReport, Mismatch
    from asymspec_vl.evals.stress.shrink import PLAIN_ENGINE, shrink
    from asymspec_vl.evals.stress.workload import Workload

    engine = dataclasses.replace(CI_CASES[18], small_pool=True)
    w = next(
        w
        for w in (draw(seed, engine=engine) for seed in range(100))
        if any(r.mode == "floor" for r in w.rows)
    )
    assert Workload.from_json(w.to_json()) == w
    floors = [r for r in w.rows if r.mode == "floor"]

    def run(trial):  # fails while a floor row runs on a preempting engine
        bad = trial.engine.preempt and any(r.mode == "floor" for r in trial.rows)
        return CaseReport(
            trial.seed,
            trial.to_json(),
            mismatches=[Mismatch("tokens", 0, "x")] if bad else [],
        )

    best = shrink(w, run, log=lambda line: None)
    assert [r.mode for r in best.rows] == ["floor"] and best.rows[0] == floors[-1]
    assert best.engine == dataclasses.replace(
        PLAIN_ENGINE, block_size=16, K=4, max_num_seqs=4, preempt=True
    )


def test_every_logit_a_step_read_is_compared_by_name_and_a_planted_error_is_reported():
    """_compare_logits on a stand-in reference: t, a, b and q of a step each checked against the reference's
    recomputation of that name on the step's tokens; q off by 1e-2 of its scale is that row's q mismatch, a NaN
    or a shape that differs never passes."""
    import math

    import torch
    from asymspec_vl.evals.stress.case import CaseReport, _compare_logits
    from asymspec_vl.evals.stress.hf_side import relative_error

    x = torch.linspace(-3, 3, 12).view(2, 6)

    class Ref:
        def __init__(self):
            self.calls = []

        def t(self, enc, y, drafts):
            self.calls.append(("t", y, drafts))
            return x

        def b(self, enc, y, drafts):
            return x

        def q(self, enc, y, drafts):
            self.calls.append(("q", y, drafts))
            return x[:1]

        def a(self, enc, y, drafts, m):
            return x[:m]

    steps = [
        {"y": [4], "drafts": [7], "t": x + 1e-7, "q": x[:1] + 3e-2, "b": x},
        {"y": [4, 7], "drafts": [5], "t": x, "a": x[:1]},
    ]
    report, ref = CaseReport(0, "{}"), Ref()
    _compare_logits(report, ref, 3, None, steps, k=6)
    assert report.logit_steps == 5 and ("q", [4], [7]) in ref.calls
    assert [(m.what, m.row) for m in report.mismatches] == [("q", 3)]
    assert 0 < report.max_error["t"] < 1e-6 and report.max_error["q"] == pytest.approx(
        1e-2
    )
    assert relative_error(x, x) == 0 and math.isinf(relative_error(x * math.nan, x))
    assert math.isinf(relative_error(x[:1], x))


@pytest.fixture(scope="module")
def reference(tiny_models):
    from asymspec_vl.evals.stress.hf_side import Reference

    return Reference(tiny_models)


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("seed", sorted(CI_CASES))
def test_every_request_equals_transformers_alone(seed, tiny_models, reference):
    from asymspec_vl.evals.stress.case import run_case

    w = ci_workload(seed)
    paths = {**tiny_models, "root": tiny_models["verifier"].parent}
    report = run_case(w, paths, reference, logit_steps=3)
    assert not report.mismatches, (report.mismatches, w.to_json())
    assert report.compared == len(w.rows) and report.logit_steps > 0
    assert report.max_error["b"] > 0  # b was compared (asymspec or scd rows ran)
    assert report.max_error["t"] > 0  # and the verifier's t of every row
    if w.engine.preempt:
        assert report.resumptions > 0, "no request was preempted: shrink the KV cache"


# -- what the stress run found ---------------------------------------------------------------------
def test_floor_rows_on_a_speculative_engine_count_no_draft_positions():
    """Found by the stress run (seed 1): a Floor request on the speculative engine (how `serve` runs Floor) reported
    accepted_at
    [0] * K where the transformers backend and the verifier engine report [] (Floor drafts nothing), so its
    acceptance_per_position was K zeros instead of none."""
    from asymspec_vl.core.trace import Stats
    from vllm_patches.requests.stats import EngineStats

    floor = EngineStats(4, "floor")
    floor.record(0, 1, 1)
    assert floor.to_dict()["accepted_at"] == [] == Stats(steps=1, emitted=1).accepted_at
    assert floor.to_dict()["acceptance_per_position"] == []
    for mode in ("asymspec", "sd", "scd", "plain"):
        assert EngineStats(3, mode).to_dict()["accepted_at"] == [0, 0, 0]


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_stop_token_equal_to_the_prompts_last_token_does_not_end_the_request(
    tiny_models, reference
):
    """Found by the stress run (seeds 126, 136): the prime token (x_comp's last token, moved to the output side and
    emitted by the prefill in place of a sample) went through vLLM's stop check, so a request whose stop tokens
    include it (Qwen's templates end the prompt with "\\n": a common stop) finished at once with no tokens and
    finish_reason "stop", where the transformers backend decodes its answer."""
    from asymspec_vl.evals.stress.case import run_case
    from asymspec_vl.evals.stress.workload import RowSpec, Workload, make_request

    from asymspec_vl.inputs.prompts import encode_request

    pair = reference.pair
    rows = []
    for mode, seed, image in (
        ("asymspec", 1, True),
        ("scd", 2, True),
        ("sd", 3, False),
        ("floor", 4, True),
        ("asymspec", 5, False),
    ):
        row = RowSpec(mode=mode, K=2, max_new=12, request_seed=seed, image=image)
        last = encode_request(
            make_request(row), pair.processor, pair.tokenizer
        ).comp.ids[-1]
        rows.append(
            RowSpec(
                mode=mode,
                K=2,
                max_new=12,
                request_seed=seed,
                image=image,
                stop_token_ids=(last, 2),
            )
        )
    w = Workload(0, EngineCase(block_size=16, K=2, max_num_seqs=4), tuple(rows))
    report = run_case(
        w,
        {**tiny_models, "root": tiny_models["verifier"].parent},
        reference,
        logit_steps=2,
    )
    assert not report.mismatches, report.mismatches


def test_the_prime_token_passes_vllms_stop_check_and_nothing_else_does():
    """vLLM's own check_stop on a request whose first output is the prime token: inside the window it goes on, a
    real first token after it still stops, and min_tokens is restored."""
    import types

    from vllm.v1.core.sched.utils import check_stop

    from vllm_patches.requests.hidden_tokens import prime_passes_stop_check

    def request(outputs):
        params = types.SimpleNamespace(
            min_tokens=0,
            eos_token_id=None,
            stop_token_ids=[212],
            repetition_detection=None,
        )
        return types.SimpleNamespace(
            pooling_params=None,
            sampling_params=params,
            output_token_ids=outputs,
            num_output_tokens=len(outputs),
            num_tokens=10 + len(outputs),
            max_tokens=8,
            status=None,
            stop_reason=None,
        )

    first = request([])
    with prime_passes_stop_check([first]):
        first.output_token_ids.append(
            212
        )  # the prime: the prompt's last token, a stop token here
        first.num_output_tokens = 1
        assert not check_stop(first, max_model_len=4096)
    assert first.sampling_params.min_tokens == 0
    later = request([212, 212])  # the first decided token is the stop token: it stops
    with prime_passes_stop_check([later]):
        assert check_stop(later, max_model_len=4096) and later.stop_reason == 212


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_preempted_request_resuming_from_the_prefix_cache_keeps_its_b(
    tiny_models, reference
):
    """Found by the long stress run (seed 108: block 32, prefix caching, forced preemption): issue 23's finding 2
    on a real engine. Row 1 (text-only asymspec, K=1) is preempted after 5 tokens and resumes on its own two
    prefix-cached blocks; meanwhile an sd / plain row in a reused batch row, its block table's tail still naming
    one of those blocks, wrote its x_comp drafts there. The resumed row's b was off by 1e-1 to 6e-1 (relative)
    at every step after that, its tokens from the 10th on. comp_view.draft now maps a row's entries past
    num_blocks_per_row to the null block."""
    from asymspec_vl.evals.stress.case import run_case

    report = run_case(
        draw(108, tp=False),
        {**tiny_models, "root": tiny_models["verifier"].parent},
        reference,
        logit_steps=6,
    )
    assert report.resumptions > 0
    assert not report.mismatches, report.mismatches


def found_case(workload_json: str, tiny_models, reference):
    """The report of a workload a stress run found (as it printed it), on the tiny models."""
    from asymspec_vl.evals.stress.case import run_case
    from asymspec_vl.evals.stress.workload import Workload

    return run_case(
        Workload.from_json(workload_json),
        {**tiny_models, "root": tiny_models["verifier"].parent},
        reference,
        logit_steps=3,
    )


# Found by the first GPU-shaped stress run (seed 2: eager, budget 32, forced preemption, seeded sampled rows).
PREEMPTED_SAMPLING = """{"engine": {"K": 2, "block_size": 16, "compiled": false, "max_num_batched_tokens": 32, "max_num_seqs": 4, "preempt": true, "prefix_caching": false, "processes": false, "small_pool": false, "tp": 1}, "rows": [{"K": 1, "arrival": 12, "config": {"gate": "lambda", "seed": 399822, "temperature": 0.8}, "image": true, "max_new": 14, "mode": "asymspec", "request_seed": 451589, "stop_token_ids": null}, {"K": 2, "arrival": 0, "config": {}, "image": true, "max_new": 37, "mode": "plain", "request_seed": 172478, "stop_token_ids": null}, {"K": 2, "arrival": 0, "config": {"seed": 848498, "temperature": 0.8}, "image": false, "max_new": 39, "mode": "asymspec", "request_seed": 451589, "stop_token_ids": null}, {"K": 2, "arrival": 8, "config": {"seed": 760293, "temperature": 0.8}, "image": false, "max_new": 29, "mode": "asymspec", "request_seed": 749890, "stop_token_ids": null}, {"K": 2, "arrival": 11, "config": {}, "image": true, "max_new": 39, "mode": "floor", "request_seed": 758930, "stop_token_ids": [115, 167, 345]}], "seed": 2}"""  # noqa: E501 (the workload as the stress run printed it)


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_preempted_sampling_request_draws_its_dropped_drafts_again_from_the_same_stream(
    tiny_models, reference
):
    """Row 0 (asymspec, temperature 0.8, seeded) is preempted twice; the scheduler drops the drafts of its last
    proposal, whose draws had advanced the request's generator: resumed, it drew its drafts from a stream one
    proposal ahead of the transformers loop's, and its tokens parted from the second on. The proposer now
    puts the generator back to its state before that proposal (rows.RequestRegistry.drop_drafts)."""
    report = found_case(PREEMPTED_SAMPLING, tiny_models, reference)
    assert report.resumptions > 0
    assert not report.mismatches, report.mismatches


# Found by the GPU-shaped long run (seed 107: budget 32, 8 sequences, K 5, prefix caching; eager too).
TRIMMED_DRAFTS = """{"engine": {"K": 5, "block_size": 32, "compiled": false, "max_num_batched_tokens": 32, "max_num_seqs": 8, "preempt": false, "prefix_caching": true, "processes": false, "small_pool": false, "tp": 1}, "rows": [{"K": 5, "arrival": 7, "config": {"beta": 2.0, "bonus": "fused", "gamma": 1.0, "gate": "kl"}, "image": false, "max_new": 3, "mode": "asymspec", "request_seed": 950826, "stop_token_ids": null}, {"K": 2, "arrival": 0, "config": {}, "image": true, "max_new": 21, "mode": "plain", "request_seed": 950826, "stop_token_ids": [66, 150, 343]}, {"K": 3, "arrival": 10, "config": {"gamma": 0.2, "seed": 320387, "temperature": 0.8}, "image": true, "max_new": 6, "mode": "asymspec", "request_seed": 883636, "stop_token_ids": [141, 350, 375]}, {"K": 4, "arrival": 0, "config": {}, "image": false, "max_new": 39, "mode": "scd", "request_seed": 917807, "stop_token_ids": null}, {"K": 1, "arrival": 11, "config": {}, "image": false, "max_new": 28, "mode": "plain", "request_seed": 853130, "stop_token_ids": [36, 148, 235]}, {"K": 5, "arrival": 12, "config": {}, "image": true, "max_new": 28, "mode": "plain", "request_seed": 404107, "stop_token_ids": [153, 291, 321]}, {"K": 4, "arrival": 14, "config": {}, "image": true, "max_new": 30, "mode": "plain", "request_seed": 738597, "stop_token_ids": [97, 107, 179]}, {"K": 1, "arrival": 16, "config": {"gamma": 1.0}, "image": true, "max_new": 19, "mode": "asymspec", "request_seed": 883636, "stop_token_ids": null}], "seed": 107}"""  # noqa: E501 (the workload as the stress run printed it)


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_no_running_request_verifies_fewer_drafts_than_it_proposed(
    tiny_models, reference
):
    """With more running requests than the step's token budget holds at K + 1 tokens each, vLLM's scheduler gave
    the last ones fewer tokens than their drafts (or none): the last row (asymspec, K 1) verified no drafts for
    three steps and emitted the verifier's tokens. The scheduler hook now starts no more requests than the budget
    holds whole (scheduler_patch.budget_room)."""
    report = found_case(TRIMMED_DRAFTS, tiny_models, reference)
    assert not report.mismatches, report.mismatches


def test_the_budget_room_keeps_every_running_decode_whole():
    from vllm_patches.hooks.scheduler_patch import budget_room

    assert [budget_room(32, 5, running) for running in (0, 3, 5, 6)] == [5, 2, 0, 0]
    assert (
        budget_room(4, 5, 0) == 1 and budget_room(4, 5, 1) == 0
    )  # one request always may run


# -- cross-family cases (issue 34) -----------------------------------------------------------------
# sampled rows across the map (seeded, with top-k / top-p / min-p), batched with CI case 18's greedy ones
CROSS_SAMPLED = (
    {"temperature": 0.8, "seed": 3, "top_k": 20},
    {"temperature": 0.8, "seed": 4, "top_p": 0.9},
    {"temperature": 0.8, "seed": 5, "min_p": 0.05},
)


def cross_workload():
    """CI case 18's rows (every method the cross-family engine serves, image and text-only, late arrivals, stop
    tokens of the same-family draw's range) on its preempting engine with the embedded cross-family pair, a
    seeded sampled asymspec, sd and scd row (CROSS_SAMPLED), a plain speculative row (refused across a map) and a
    sampled floor row."""
    import dataclasses

    from asymspec_vl.evals.stress.workload import RowSpec, with_pair

    w = with_pair(ci_workload(18), "cross")
    sampled = tuple(
        RowSpec(mode, 2, 10, seed, image=seed % 2 == 0, arrival=2 * seed, config=cfg)
        for mode, seed, cfg in zip(("asymspec", "sd", "scd"), (8, 9, 10), CROSS_SAMPLED)
    )
    others = (
        RowSpec("plain", 2, 8, 6),
        RowSpec("floor", 2, 8, 7, config={"temperature": 0.8, "seed": 3}),
    )
    return dataclasses.replace(w, rows=w.rows + sampled + others)


@pytest.fixture(scope="module")
def cross_reference(tiny_models):
    from asymspec_vl.evals.stress.hf_side import Reference

    return Reference(tiny_models, "cross")


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_cross_family_case_runs_two_vocabularies_and_reports_a_mismatch(
    tiny_models, cross_reference, monkeypatch
):
    """One cross-family case (the embedded pair embedded-llama on the engine and the transformers side): its pair
    has two vocabularies (the map is not the identity), the refused rows are skipped and counted by reason, every
    served request equals transformers (its sampled asymspec, sd and scd rows too, batched with greedy ones), a,
    b and q agree in the drafter's ids, t in the verifier's; and reference answers that differ (row 0's tokens
    and the sampled asymspec row's moved by one) are reported as those rows' token mismatches, nothing else."""
    from asymspec_vl.evals.stress.case import run_case, served
    from asymspec_vl.evals.stress.workload import Workload

    alone = cross_reference.alone

    def one_wrong(row, enc):
        out = alone(row, enc)
        if row in wrong:
            out.token_ids = [t + 1 for t in out.token_ids]
        return out

    w = cross_workload()
    rows = served(w, cross_reference)[0].rows  # as run_case serves them
    wrong = (rows[0], next(r for r in rows if r.config.get("top_k")))
    monkeypatch.setattr(cross_reference, "alone", one_wrong)
    paths = {**tiny_models, "root": tiny_models["verifier"].parent}
    report = run_case(w, paths, cross_reference, logit_steps=3)
    v = report.vocabulary
    assert not v["identity"] and v["drafter"] != v["verifier"] > v["shared"]
    assert not cross_reference.vmap.identity
    assert report.skipped == {"plain": 1}
    ran = Workload.from_json(report.workload)
    assert ran.engine.pair == "cross" and len(ran.rows) == len(w.rows) - 1
    assert {r.mode for r in ran.rows} == {"asymspec", "sd", "scd", "floor"}
    sampled = [r for r in ran.rows if "temperature" in r.config]
    assert [r.config for r in sampled][:3] == list(CROSS_SAMPLED)
    assert report.sampled == len(sampled) >= 3
    shared = set(cross_reference.vmap.verifier_ids.tolist())
    stops = [r.stop_token_ids for r in ran.rows if r.stop_token_ids]
    assert stops and all(set(s) <= shared for s in stops)
    assert any(max(r.stop_token_ids) >= 276 for r in w.rows if r.stop_token_ids)
    assert report.compared == report.requests == len(ran.rows)
    assert [(m.what, m.row) for m in report.mismatches] == [
        ("tokens", 0),
        ("tokens", ran.rows.index(wrong[1])),
    ], report.mismatches
    assert report.logit_steps > 0 and report.resumptions > 0
    assert 0 < report.max_error["a"] < 1e-4 and 0 < report.max_error["b"] < 1e-4
    # t in the verifier's ids; q: the sampled sd / scd rows' drafting logits, in the drafter's
    assert 0 < report.max_error["t"] < 1e-4 and 0 < report.max_error["q"] < 1e-4


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
def test_a_cross_family_engine_at_tp2_with_chunked_prefill_equals_transformers(
    tiny_models, cross_reference
):
    """Found by the stress run (seed 14, --pairs cross): at TP=2 a cross-family asymspec row's first b pass feeds
    its whole drafter x_comp (71 tokens here) in chunks of the token budget; the leading chunk reads no logits, and
    FullView.score still called compute_logits on its 0 rows, whose tensor-parallel all-gather killed both workers
    (the CPU build's shm_all_gather traps on an empty tensor: `trap divide error` in _C.abi3.so). That communicator
    is the AVX-512 CPUs'; gloo's all-gather takes 0 rows, so on other CPUs the stand-in test of the rule
    (tests/vllm_patches/drafter/test_full_view.py) is the one that fails on the old code."""
    from asymspec_vl.evals.stress.case import run_case
    from asymspec_vl.evals.stress.workload import RowSpec, Workload

    engine = EngineCase(
        block_size=16,
        K=2,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        tp=2,
        processes=True,
        pair="cross",
    )
    w = Workload(14, engine, (RowSpec("asymspec", 2, 6, 2, image=True),))
    paths = {**tiny_models, "root": tiny_models["verifier"].parent}
    report = run_case(w, paths, cross_reference, logit_steps=2)
    assert not report.mismatches, (report.mismatches, w.to_json())
    assert report.compared == 1 and report.max_error["b"] > 0


DRAFTER_HOT = {"temperature": 0.8, "seed": 7}


@pytest.mark.vllm
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("pair", ["same", "cross"])
def test_drafter_rows_on_their_engine_equal_transformers_batched(
    pair, tiny_models, reference, cross_reference
):
    """The drafter alone's rows of a case on its plain engine (chunked prefill, more rows than max_num_seqs), greedy
    and seeded sampled (filters on two) in one batch, image and text-only, with logprobs: tokens equal
    transformers', logprobs within the tolerance (verifier ids across the map). Found by the stress run (seeds 77,
    80, 83, 86, 87, 96 of `--pairs mix --no-tp`): vLLM's CPU sampler drew a seeded row unseeded beside a greedy one
    (vllm_patches/hooks/cpu_generators.forward_cpu)."""
    from asymspec_vl.evals.stress.case import run_case
    from asymspec_vl.evals.stress.workload import DRAFTER, RowSpec, Workload

    lp = {"logprobs": 2}
    rows = (
        RowSpec(DRAFTER, 2, 8, 11, config=lp),
        RowSpec(DRAFTER, 2, 8, 12, config={**lp, **DRAFTER_HOT}),
        RowSpec(DRAFTER, 2, 6, 13, image=False, config={**DRAFTER_HOT, "top_k": 20}),
        RowSpec(DRAFTER, 2, 6, 11, arrival=2, config={**DRAFTER_HOT, "min_p": 0.05}),
        RowSpec(DRAFTER, 2, 5, 14, arrival=3, config={**lp, "top_p": 0.9}),
    )
    engine = EngineCase(
        block_size=16, K=2, max_num_seqs=3, max_num_batched_tokens=64, pair=pair
    )
    ref = reference if pair == "same" else cross_reference
    paths = {**tiny_models, "root": tiny_models["verifier"].parent}
    report = run_case(Workload(3, engine, rows), paths, ref, logit_steps=2)
    assert not report.mismatches, report.mismatches
    assert report.compared == report.drafter == 5 and report.sampled == 3
    assert 0 < report.max_error["logprobs"] < 1e-4
