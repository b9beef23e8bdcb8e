"""The patched vLLM path end to end on the tiny models (CPU build): token equality with the transformers
backend, what patches (4) and (5) are needed for, the vision tower once per request, per-request errors.

Engines are expensive (10-20 s each to start on 2 cores): each is built once per module and shut down as
soon as its tests are done."""

import copy

import pytest
import torch
from helpers import (
    assert_same_logprobs,
    random_image,
    random_request,
    runner_of,
    summary,
)

pytestmark = pytest.mark.vllm

N_REQUESTS = 10


@pytest.fixture(scope="module")
def vl(tiny_models):
    from asymspec_vl import AsymSpecVL

    # 16-token blocks (the CPU default is 128): prompts and x_full views span several blocks, and the
    # one-by-one runs after a batch hit vLLM's prefix cache (verifier and drafter KV blocks alike)
    pipe = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        text_drafter=str(tiny_models["text_drafter"]),
        backend="vllm",
        block_size=16,
    )
    yield pipe
    pipe.backend.close()


def _close(vl, method, K):
    vl.backend.close(vl.backend.engine_for(method, K)[0])


def _requests():
    from asymspec_vl import Request

    reqs = [random_request(s) for s in range(N_REQUESTS)]
    reqs.append(
        Request(
            question="What is the answer?",
            full_context="The answer is 42, said the table.",
            compressed_context="a table",
        )
    )  # text-only AsymSpec: x_full without an image
    return reqs


@pytest.mark.parametrize(
    "K, cfg_kwargs",
    [
        (2, {}),
        (4, {"gamma": 0.2}),
        (2, {"bonus": "fused", "gate": "lambda", "beta": 0.5}),
    ],
)
def test_asymspec_tokens_equal_transformers_one_by_one_and_batched(
    vl, tiny_vl, K, cfg_kwargs
):
    from asymspec_vl import AsymSpecConfig

    cfg = AsymSpecConfig(K=K, max_new_tokens=24, **cfg_kwargs)
    reqs = _requests()
    expected = summary(tiny_vl.generate_batch(reqs, "asymspec", cfg))
    batched = summary(vl.generate_batch(reqs, "asymspec", cfg))
    single = summary([vl.generate_batch([r], "asymspec", cfg)[0] for r in reqs])
    assert batched == expected
    assert single == expected
    sources = {s for row in expected for s in row[1]}
    assert {"draft", "fused"} <= sources  # both gate outcomes were exercised
    if K == 4:
        _close(vl, "asymspec", K)


@pytest.mark.parametrize("method", ["sd", "scd", "floor", "drafter"])
def test_other_methods_equal_transformers(vl, tiny_vl, method):
    from asymspec_vl import AsymSpecConfig

    cfg = AsymSpecConfig(K=2, max_new_tokens=16)
    reqs = [
        random_request(s) for s in range(N_REQUESTS if method in ("sd", "scd") else 4)
    ]
    assert summary(vl.generate_batch(reqs, method, cfg)) == summary(
        tiny_vl.generate_batch(reqs, method, cfg)
    )
    if method in ("sd", "floor", "drafter"):
        _close(vl, method, 2)


# -- what patches (4) and (5) are for ------------------------------------------------------------
def _hf_drafter_logits(hf_drafter, full, drafts, K, deepstack=True):
    """The transformers Qwen3-VL drafter on x_full + d_1..d_{K-1}: logits at the K draft positions."""
    ids = torch.tensor([full.ids + drafts[: K - 1]])
    lm = hf_drafter.model.language_model
    saved = lm._deepstack_process
    if not deepstack:
        lm._deepstack_process = lambda hidden, *args, **kwargs: hidden
    try:
        with torch.no_grad():
            out = hf_drafter(
                input_ids=ids,
                pixel_values=full.pixel_values,
                image_grid_thw=full.image_grid_thw,
                attention_mask=torch.ones_like(ids),
            )
    finally:
        lm._deepstack_process = saved
    return out.logits[0, -K:].float()


def _captured_vs_hf(vl, tiny_vl, reqs, cfg, deepstack=True):
    """Per request: (|x_full| <= |x_comp|, max |vLLM drafter logits - transformers drafter logits|)."""
    from asymspec_vl.inputs.prompts import encode_request
    from vllm_patches.probes import probe

    llm = vl.backend.engine(vl.backend.engine_for("asymspec", cfg.K)[0])
    probe.capture_full_view_logits(llm)
    vl.generate_batch(reqs, "asymspec", cfg)
    captured = {c["x_full"]: c for c in probe.captured_full_view_logits(llm).values()}
    probe.capture_full_view_logits(llm, on=False)
    rows = []
    for r in reqs:
        enc = encode_request(r, vl.pair.processor, vl.pair.tokenizer)
        c = captured[tuple(enc.full.ids)]
        ref = _hf_drafter_logits(
            tiny_vl.backend.drafter, enc.full, c["drafts"], cfg.K, deepstack
        )
        rows.append(
            (len(enc.full.ids) <= len(enc.comp.ids), float((c["a"] - ref).abs().max()))
        )
    return rows


def _gate_requests():
    """Images from 32x32 (one image token: x_full shorter than x_comp) to 128x128 (x_full longer)."""
    from asymspec_vl import Request

    sizes = [32, 32, 128, 96]
    return [
        Request(
            random_image(100 + i, s, s + 1),
            f"What is shown in picture {i}?",
            caption="a chart of sales",
            ocr="12 34",
        )
        for i, s in enumerate(sizes)
    ]


def test_drafter_logits_match_transformers_only_with_patches_4_and_5(vl, tiny_vl):
    from asymspec_vl import AsymSpecConfig
    from vllm_patches import switches

    cfg = AsymSpecConfig(K=2, max_new_tokens=4)
    reqs = _gate_requests()
    on = _captured_vs_hf(vl, tiny_vl, reqs, cfg)
    assert any(short for short, _ in on) and not all(short for short, _ in on)
    assert (
        max(d for _, d in on) < 1e-3
    )  # the drafter reads the image, DeepStack features included
    no_deepstack = _captured_vs_hf(vl, tiny_vl, reqs, cfg, deepstack=False)
    assert (
        min(d for _, d in no_deepstack) > 1e-2
    )  # ... and DeepStack matters for these logits
    with switches.disabled("mm_embeds"):
        off4 = _captured_vs_hf(vl, tiny_vl, reqs, cfg)
    assert (
        min(d for _, d in off4) > 1e-2
    )  # patch (4) off: image_pad tokens read as text
    with switches.disabled("no_length_gate"):
        off5 = _captured_vs_hf(vl, tiny_vl, reqs, cfg)
    for (short, _d_on), (_, d_off) in zip(on, off5):
        if short:
            assert (
                d_off > 1e-2
            )  # patch (5) off: x_full not longer -> the drafter reads x_comp
        else:
            assert d_off < 1e-3


def test_vision_tower_runs_once_per_request(vl):
    from asymspec_vl import AsymSpecConfig
    from vllm_patches.probes import probe

    cfg = AsymSpecConfig(K=2, max_new_tokens=30)
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    reqs = [random_request(s) for s in range(5)]
    before = probe.counters(llm)["vision_tower_calls"]
    results = vl.generate_batch(reqs, "asymspec", cfg) + [
        vl.generate(**_kw(reqs[0]), method="asymspec", config=cfg)
    ]
    assert all(r.stats.steps >= 5 for r in results)
    assert probe.counters(llm)["vision_tower_calls"] - before == len(results)
    c = probe.counters(
        llm
    )  # the runner hears of a finish at the next step: only the last request is left
    from asymspec_vl.inputs.prompts import encode_request

    block = llm.llm_engine.vllm_config.cache_config.block_size
    longest = max(
        len(encode_request(r, vl.pair.processor, vl.pair.tokenizer).full.ids)
        for r in reqs
    )
    assert c["live_requests"] <= 1
    assert c["full_view_blocks"] - c["free_full_view_blocks"] <= -(
        -(longest + 30 + 3) // block
    )


def _kw(r):
    return dict(image=r.image, question=r.question, caption=r.caption, ocr=r.ocr)


def test_bad_request_fails_alone(vl):
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request
    from vllm_patches.requests.request_args import pack_tensor, unpack_tensor

    cfg = AsymSpecConfig(K=2, max_new_tokens=10)
    b = vl.backend
    llm = b.engine(b.engine_for("asymspec", 2)[0])
    encs = [
        encode_request(random_request(s), vl.pair.processor, vl.pair.tokenizer)
        for s in range(5)
    ]
    prompts, params = map(
        list, zip(*(b.engine_request(e, b.plan_request("asymspec", cfg)) for e in encs))
    )
    alone = [
        generate(llm, [p], [q])[0].outputs[0].token_ids
        for p, q in zip(prompts[::2], params[::2])
    ]

    def broken(i, **fields):
        p = params[i].clone()
        p.extra_args = copy.deepcopy(params[i].extra_args)
        p.extra_args["asymspec"].update(fields)
        return p

    nan = unpack_tensor(
        params[3].extra_args["asymspec"]["pixel_values"], "pixel_values"
    ).clone()
    nan[0, 0] = float("nan")
    mixed = [
        params[0],
        broken(1, pixel_values=pack_tensor(torch.zeros(3, 7))),
        params[2],
        broken(3, pixel_values=pack_tensor(nan)),
        params[4],
    ]
    outs = generate(llm, prompts, mixed)
    assert [o.outputs[0].token_ids for o in outs[::2]] == alone
    for o, words in (
        (outs[1], "InvalidImageError: pixel_values must be float"),
        (outs[3], "InvalidImageError: pixel_values hold NaN"),
    ):
        assert o.outputs[0].finish_reason == "error" and o.outputs[0].token_ids == []
        assert o.kv_transfer_params["asymspec"]["error"].startswith(words)
    wrong_type = params[0].clone()
    wrong_type.extra_args = {"asymspec": ["x_full"]}
    out = generate(llm, prompts[:1], [wrong_type])[0]
    assert (
        out.outputs[0].finish_reason == "error"
        and "must be a dict" in out.kv_transfer_params["asymspec"]["error"]
    )
    penalised = params[
        0
    ].clone()  # what no method's rule defines fails its request alone
    penalised.repetition_penalty = 1.3
    out = generate(llm, prompts[:1], [penalised])[0]
    assert (
        out.outputs[0].finish_reason == "error"
        and "not penalties" in out.kv_transfer_params["asymspec"]["error"]
    )
    assert (
        generate(llm, prompts[:1], params[:1])[0].outputs[0].token_ids == alone[0]
    )  # the engine goes on


MULTIPROC_SCRIPT = """
import json, os, sys
sys.path[:0] = [os.path.dirname({tests!r})]  # the repository first: tests/vllm_patches/ must not shadow the package
sys.path.append({tests!r})
from helpers import random_request
from vllm import LLM, SamplingParams  # vllm_patches is not imported here: the plugin entry point loads it
from asymspec_vl import AsymSpecConfig
from asymspec_vl.inputs.prompts import encode_request
from asymspec_vl.pair.model_pair import ModelPair
from vllm_patches.requests.request_args import make_extra_args
if __name__ == "__main__":
    pair = ModelPair.load({drafter!r}, {verifier!r})
    llm = LLM(model={verifier!r}, enforce_eager=True, max_model_len=4096, max_num_seqs=8, dtype="float32",
              speculative_config={{"method": "asymspec", "model": {drafter!r}, "num_speculative_tokens": 2}})
    cfg = AsymSpecConfig(K=2, max_new_tokens=12)
    encs = [encode_request(random_request(s), pair.processor, pair.tokenizer) for s in range(3)]
    params = [SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, stop_token_ids=sorted(pair.stop_ids(cfg)),
                             extra_args=make_extra_args("asymspec", cfg, e.full.ids, e.full.pixel_values,
                                                        e.full.image_grid_thw, pair.banned_ids()))
              for e in encs]
    outs = llm.generate([{{"prompt_token_ids": e.comp.ids}} for e in encs], params, use_tqdm=False)
    print("RESULT " + json.dumps([list(o.outputs[0].token_ids) for o in outs]))
"""


def test_plugin_entry_point_patches_a_multiprocess_engine(vl, tiny_models, tmp_path):
    """A fresh interpreter, engine core in its own process, no explicit `import vllm_patches`."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from asymspec_vl import AsymSpecConfig

    script = tmp_path / "multiproc.py"
    script.write_text(
        MULTIPROC_SCRIPT.format(
            tests=str(Path(__file__).parents[2]),
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(tiny_models["verifier"]),
        )
    )
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
    }
    run = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, run.stdout[-3000:] + run.stderr[-3000:]
    expected = [
        r.token_ids
        for r in vl.generate_batch(
            [random_request(s) for s in range(3)],
            "asymspec",
            AsymSpecConfig(K=2, max_new_tokens=12),
        )
    ]
    assert json.loads(line[0][len("RESULT ") :]) == expected


def test_benchmark_reports_tokens_and_phase_times(vl):
    """bench_vllm on the tiny models (one method, a short run): figures are printed, not asserted."""
    from asymspec_vl.evals.benchmarks.bench_vllm import bench, requests

    from asymspec_vl import AsymSpecConfig

    row = bench(
        vl,
        "asymspec",
        requests(2, 64),
        AsymSpecConfig(K=2, max_new_tokens=6, ignore_eos=True),
    )
    assert row["tokens"] == 12 and row["tokens_per_s"] > 0
    assert all(
        row[f"{p}_ms_per_step"] > 0 for p in ("verifier", "base_pass", "gate", "draft")
    )
    assert 0 <= row["acceptance_rate"] <= 1 and row["mean_accepted_length"] >= 1


def test_requests_wait_for_room_in_the_full_view_pool(vl, tiny_vl, monkeypatch):
    """An x_full pool with room for two requests at a time: a batch of six still completes, each request
    with the tokens it gets alone (admission control, not pool exhaustion errors)."""
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
    from asymspec_vl.inputs.prompts import encode_request
    from vllm_patches.probes import probe

    b = vl.backend
    small = VLLMBackend(
        b.pair, b.drafter, b.verifier, None, b.dtype, b.tp, {"max_num_seqs": 8}
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=20)
    monkeypatch.setenv("ASYMSPEC_FULL_VIEW_TOKENS", "256")
    llm = small.engine(small.engine_for("asymspec", 2)[0])
    monkeypatch.delenv("ASYMSPEC_FULL_VIEW_TOKENS")
    try:
        assert (
            probe.counters(llm)["full_view_blocks"]
            * llm.llm_engine.vllm_config.cache_config.block_size
            <= 256
        )
        reqs = [random_request(s) for s in range(6)]
        rows = small.run(
            [encode_request(r, vl.pair.processor, vl.pair.tokenizer) for r in reqs],
            small.plan_request("asymspec", cfg),
        )
        assert [r.token_ids for r in rows] == [
            r.token_ids for r in tiny_vl.generate_batch(reqs, "asymspec", cfg)
        ]
        scheduler = (
            llm.llm_engine.engine_core.engine_core.scheduler
        )  # in-process engine core
        capacity = scheduler.asymspec.pool.usable
        assert (
            scheduler.asymspec.pool.peak <= capacity < 6
        )  # at most `capacity` requests at once: the rest waited
        from asymspec_vl.backends.vllm.engine import generate

        enc = encode_request(reqs[0], vl.pair.processor, vl.pair.tokenizer)
        prompt, params = small.engine_request(enc, small.plan_request("asymspec", cfg))
        _, too_long = small.engine_request(
            enc, small.plan_request("asymspec", cfg.replace(max_new_tokens=400))
        )
        outs = generate(llm, [prompt] * 2, [too_long, params])
        assert outs[0].outputs[0].finish_reason == "error"
        assert (
            outs[0]
            .kv_transfer_params["asymspec"]["error"]
            .startswith("PoolExhaustedError")
        )
        assert list(outs[1].outputs[0].token_ids) == rows[0].token_ids
    finally:
        small.close()


def test_preempted_requests_resume_as_if_never_preempted(vl, tiny_vl):
    """A verifier KV cache too small for the batch: vLLM preempts running requests and recomputes them. Each
    resumes with its last output token held back and emitted again by the resumed prefill, so the tokens,
    sources and step counts equal the transformers loop's (before, the first token after a resumption was
    the verifier's plain greedy sample). The same for SCD, whose targets also differ from greedy."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
    from vllm_patches.probes import probe

    b = vl.backend
    small = VLLMBackend(
        b.pair,
        b.drafter,
        b.verifier,
        None,
        b.dtype,
        b.tp,
        {"block_size": 16, "num_gpu_blocks_override": 24},
    )  # 384 tokens for 6 requests
    cramped = AsymSpecVL(vl.pair, small, vl.names)
    reqs = [random_request(s) for s in range(6)]
    try:
        for method, K in (("asymspec", 2), ("scd", 2), ("asymspec", 4)):
            cfg = AsymSpecConfig(K=K, max_new_tokens=48)
            llm = small.engine(small.engine_for(method, K)[0])
            before = probe.counters(llm)["resumptions"]
            got = summary(cramped.generate_batch(reqs, method, cfg))
            assert probe.counters(llm)["resumptions"] > before, (
                "no request was preempted: shrink the cache"
            )
            assert got == summary(tiny_vl.generate_batch(reqs, method, cfg)), (
                method,
                K,
            )
    finally:
        small.close()


def test_prompts_prefilled_in_chunks_give_the_same_tokens(vl, tiny_vl):
    """A 32-token step budget: every prompt is prefilled over several steps (chunked prefill, vLLM's default
    on GPUs for long prompts). The prime token, the x_comp-view scores b and the drafts are unaffected."""
    from asymspec_vl import AsymSpecConfig, AsymSpecVL
    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
    from asymspec_vl.inputs.prompts import encode_request

    b = vl.backend
    small = VLLMBackend(
        b.pair,
        b.drafter,
        b.verifier,
        None,
        b.dtype,
        b.tp,
        {"block_size": 16, "max_num_batched_tokens": 32, "max_num_seqs": 4},
    )
    chunked = AsymSpecVL(vl.pair, small, vl.names)
    reqs = [random_request(s) for s in range(6)]
    assert (
        min(
            len(encode_request(r, vl.pair.processor, vl.pair.tokenizer).comp.ids)
            for r in reqs
        )
        > 2 * 32
    )
    try:
        for method in ("asymspec", "scd"):
            cfg = AsymSpecConfig(K=2, max_new_tokens=32)
            llm = small.engine(small.engine_for(method, 2)[0])
            assert (
                llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens == 32
            )
            sizes = []  # tokens per drafter forward: the x_full prefill is chunked to the same budget
            hook = runner_of(llm).drafter.model.register_forward_pre_hook(
                lambda module, args, kwargs, sizes=sizes: sizes.append(
                    len(kwargs["positions"][-1])
                ),
                with_kwargs=True,
            )
            try:
                assert summary(chunked.generate_batch(reqs, method, cfg)) == summary(
                    tiny_vl.generate_batch(reqs, method, cfg)
                ), method
            finally:
                hook.remove()
            assert sizes and max(sizes) <= 32
    finally:
        small.close()


def test_stopping_a_stream_aborts_its_requests(vl, tiny_vl):
    """on_step raising (the demo's Stop) aborts the batch's requests in the engine: the scheduler holds none
    and no x_full pool share, so the next call decodes only its own requests, with the usual tokens."""
    from asymspec_vl import AsymSpecConfig

    class Stop(Exception):
        pass

    steps = []

    def stop_after_three(rows):
        steps.append(len(rows))
        if len(steps) == 3:
            raise Stop

    cfg = AsymSpecConfig(K=2, max_new_tokens=30)
    reqs = [random_request(s) for s in range(3)]
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    with pytest.raises(Stop):
        vl.generate_batch(reqs, "asymspec", cfg, on_step=stop_after_three)
    scheduler = (
        llm.llm_engine.engine_core.engine_core.scheduler
    )  # in-process engine core
    assert not llm.llm_engine.has_unfinished_requests()
    assert not scheduler.requests and not scheduler.asymspec.pool.reserved
    assert summary(vl.generate_batch(reqs[:1], "asymspec", cfg)) == summary(
        tiny_vl.generate_batch(reqs[:1], "asymspec", cfg)
    )


def test_stop_tokens_cut_like_transformers(vl, tiny_vl):
    """Stop tokens that fall among accepted drafts, fused or bonus tokens end a request exactly where the
    decoding loop ends it (tokens, sources and counts)."""
    from asymspec_vl import AsymSpecConfig

    reqs = [random_request(s) for s in range(6)]
    free = tiny_vl.generate_batch(
        reqs, "asymspec", AsymSpecConfig(K=2, max_new_tokens=24)
    )
    stops = tuple(
        sorted({r.token_ids[4] for r in free} | {r.token_ids[9] for r in free})
    )
    cfg = AsymSpecConfig(K=2, max_new_tokens=24, stop_token_ids=stops)
    expected = summary(tiny_vl.generate_batch(reqs, "asymspec", cfg))
    assert summary(vl.generate_batch(reqs, "asymspec", cfg)) == expected
    assert {row[2] for row in expected} >= {"stop"}


def test_requests_without_extra_args_are_ordinary_speculative_decoding(vl, tiny_vl):
    """No extra_args: the drafter drafts on the verifier's prompt, greedy verification: the verifier's own
    greedy output (lossless), with vLLM's first token from the prefill."""
    from vllm import SamplingParams

    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request

    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    encs = [
        encode_request(random_request(s), vl.pair.processor, vl.pair.tokenizer)
        for s in range(3)
    ]
    outs = generate(
        llm,
        [{"prompt_token_ids": e.comp.ids} for e in encs],
        [SamplingParams(temperature=0, max_tokens=16, ignore_eos=True) for _ in encs],
    )
    verifier = tiny_vl.backend.verifier
    for e, o in zip(encs, outs):
        ids = torch.tensor([e.comp.ids])
        ref = verifier.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=16,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, ids.shape[1] :].tolist()
        assert list(o.outputs[0].token_ids) == ref
        assert o.kv_transfer_params is None  # no asymspec statistics for plain requests


def test_plain_requests_asking_for_logprobs_get_the_verifiers(vl, tiny_vl):
    """Finding 7: a plain request (no extra_args) on an asymspec engine that asks for logprobs gets its greedy
    tokens and, per token, the verifier's log-softmax logprob of it and the top 2 (the old sampler returned
    no logprobs: vLLM's chat server then indexed an empty list, HTTP 500; the CPU build failed the request).
    An sd row asking for logprobs gets the verifier's too (SD's tokens are the verifier's greedy tokens)."""
    from vllm import SamplingParams

    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request
    from vllm_patches.requests.request_args import make_extra_args

    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    encs = [
        encode_request(random_request(s), vl.pair.processor, vl.pair.tokenizer)
        for s in range(2)
    ]
    sd = SamplingParams(
        temperature=0,
        max_tokens=8,
        logprobs=2,
        extra_args=make_extra_args("sd", AsymSpecConfig(K=2, max_new_tokens=8)),
    )
    outs = generate(
        llm,
        [{"prompt_token_ids": e.comp.ids} for e in encs]
        + [{"prompt_token_ids": encs[0].comp.ids}],
        [
            SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=2)
            for _ in encs
        ]
        + [sd],
    )
    verifier = tiny_vl.backend.verifier
    for e, o in zip(encs, outs):
        ids = torch.tensor([e.comp.ids])
        ref = verifier.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
        tokens = ref.sequences[0, ids.shape[1] :].tolist()
        assert list(o.outputs[0].token_ids) == tokens
        got = o.outputs[0].logprobs
        assert got is not None and len(got) == len(tokens)
        for token, step, logits in zip(tokens, got, ref.logits):
            want = logits[0].float().log_softmax(-1)
            assert step[token].logprob == pytest.approx(float(want[token]), abs=1e-4)
            assert set(step) >= set(want.topk(2).indices.tolist())
    sd_out, plain = outs[2].outputs[0], outs[0].outputs[0]
    assert (
        list(sd_out.token_ids) == list(plain.token_ids)[:8]
        and len(sd_out.logprobs) == 8
    )
    for token, step, want in zip(sd_out.token_ids, sd_out.logprobs, plain.logprobs):
        assert step[token].logprob == pytest.approx(want[token].logprob, abs=1e-4)


@pytest.mark.parametrize(
    "method, sampled",
    [("floor", {}), ("asymspec", {}), ("asymspec", {"temperature": 0.8, "seed": 3})],
)
def test_vllm_logprobs_equal_the_transformers_backends(vl, tiny_vl, method, sampled):
    """Floor's from vLLM's own sampler, AsymSpec's from the patched sampler: each token under the distribution it
    was chosen from (core/logprobs.py), equal to the transformers backend's within float32 tolerance."""
    from asymspec_vl import AsymSpecConfig

    cfg = AsymSpecConfig(
        K=2, gamma=0.3, max_new_tokens=10, ignore_eos=True, logprobs=3, **sampled
    )
    distributions = set()
    for seed in (3, 4):
        r = random_request(seed)
        want = tiny_vl.generate_batch([r], method, cfg)[0]
        got = vl.generate_batch([r], method, cfg)[0]
        distributions |= set(assert_same_logprobs([got], [want], tol=2e-3))
    assert (
        distributions == {"t"} if method == "floor" else {"a", "fused"} <= distributions
    )


@pytest.mark.parametrize("method", ["asymspec", "floor", "sd"])
def test_prompt_logprobs_equal_the_verifiers_over_x_comp(vl, tiny_vl, method):
    """prompt_logprobs=k: per x_comp token the verifier's logprob after the tokens before it, its rank and the k
    best, equal on both backends and to a from-scratch forward. On the speculative engine the prefill stops one
    token short (hidden_tokens.prime): that token's entry comes from the prime step's sample logprobs, and the
    rows the engine computed for it are not returned where the request asked none (logprobs None) or fewer (1), and
    a request that asks more sample alternatives than prompt ones (4 > 3) gets all it asked."""
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.hf.reference import logits_after
    from asymspec_vl.inputs.prompts import encode_request

    for seed, logprobs in ((3, None), (4, 1), (5, 4)):
        r = random_request(seed)
        cfg = AsymSpecConfig(
            K=2, gamma=0.3, max_new_tokens=8, prompt_logprobs=3, logprobs=logprobs
        )
        want, got = (
            tiny_vl.generate_batch([r], method, cfg)[0],
            vl.generate_batch([r], method, cfg)[0],
        )
        comp = encode_request(r, tiny_vl.pair.processor, tiny_vl.pair.tokenizer).comp
        scratch = (
            logits_after(tiny_vl.backend.verifier, comp, [], len(comp.ids))
            .float()
            .log_softmax(-1)
        )
        assert (
            got.token_ids == want.token_ids
            and got.prompt_logprobs[0] is None
            and want.prompt_logprobs[0] is None
        )
        assert len(got.prompt_logprobs) == len(want.prompt_logprobs) == len(comp.ids)
        for j, (g, w) in enumerate(
            zip(got.prompt_logprobs[1:], want.prompt_logprobs[1:])
        ):
            assert g.token_id == w.token_id == comp.ids[j + 1] and g.rank == w.rank
            assert g.logprob == pytest.approx(w.logprob, abs=2e-3)
            assert w.logprob == pytest.approx(
                scratch[j, comp.ids[j + 1]].item(), abs=1e-4
            )
            assert (
                [i for i, _ in g.top]
                == [i for i, _ in w.top]
                == scratch[j].topk(3).indices.tolist()
            )
        if logprobs is None:
            assert got.logprobs is None and want.logprobs is None
        else:
            assert len(got.logprobs) == len(got.token_ids) and all(
                len(x.top) == logprobs for x in got.logprobs
            )


def test_in_a_batch_where_one_asymspec_row_asks_for_logprobs_it_gets_the_transformers_backends(
    vl, tiny_vl
):
    """One engine step decides both rows (one group); only the asking row's logprobs are computed and returned."""
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request

    asks = AsymSpecConfig(
        K=2, gamma=0.3, max_new_tokens=10, ignore_eos=True, logprobs=2
    )
    encs = [
        encode_request(random_request(s), vl.pair.processor, vl.pair.tokenizer)
        for s in (3, 4)
    ]
    jobs = [
        vl.backend.engine_request(
            encs[0], vl.backend.plan_request("asymspec", asks.replace(logprobs=None))
        ),
        vl.backend.engine_request(encs[1], vl.backend.plan_request("asymspec", asks)),
    ]  # the second row asks: its rows are mapped back
    from vllm import SamplingParams

    plain = (
        {"prompt_token_ids": encs[0].comp.ids},
        SamplingParams(temperature=0, max_tokens=10, ignore_eos=True),
    )
    jobs = (
        [plain] + jobs
    )  # a row of another group first: the asymspec group's rows are not its batch positions
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    outs = generate(llm, [p for p, _ in jobs], [params for _, params in jobs])
    want = tiny_vl.generate_batch([random_request(4)], "asymspec", asks)[0]
    got = outs[2].outputs[0]
    assert list(got.token_ids) == want.token_ids and outs[1].outputs[0].logprobs is None
    for token, entry, w in zip(got.token_ids, got.logprobs, want.logprobs):
        assert entry[token].logprob == pytest.approx(w.logprob, abs=2e-3)


@pytest.mark.parametrize("method", ["asymspec", "scd"])
def test_on_step_streams_growing_rows_with_their_labels(vl, method):
    """Streamed rows grow by prefixes; while streaming, every token already carries the label the finished
    output reports (the engine's per-step rule applied to each step's new tokens), and the counters agree."""
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.core.trace import LABELS

    accepted_label = LABELS[method].accepted
    for s in range(4):
        snaps, done = [], []
        res = vl.generate(
            **_kw(random_request(s)),
            method=method,
            config=AsymSpecConfig(K=2, max_new_tokens=20),
            on_step=lambda rows, snaps=snaps, done=done: (
                snaps.append(
                    (
                        list(rows[0].token_ids),
                        list(rows[0].sources),
                        copy.deepcopy(rows[0].stats),
                    )
                ),
                done.append(rows[0].done),
            ),
        )
        assert len(snaps) > 2 and all(
            a[0] == b[0][: len(a[0])] for a, b in zip(snaps, snaps[1:])
        )
        assert done == [False] * (len(done) - 1) + [True]  # as the hf loop marks it
        assert snaps[-1][0] == res.token_ids
        final = [t.source for t in res.trace]
        for ids, sources, stats in snaps[
            :-1
        ]:  # the last step may be cut by a stop token
            assert sources == final[: len(ids)]
            assert (stats.emitted, stats.accepted) == (
                len(ids),
                sources.count(accepted_label),
            )
            assert (
                stats.steps == len(ids) - stats.accepted
                and stats.drafted == 2 * stats.steps
            )
        assert res.stats.acceptance_per_position == [
            n / res.stats.steps for n in res.stats.accepted_at
        ]


def test_a_stop_token_exactly_at_the_budget_is_a_stop(vl, tiny_vl):
    """The max_new-th token is the stop token: both backends end there with finish_reason "stop" (vLLM
    checks stop tokens before the length, and the decoding loop agrees), tokens and counts alike."""
    from helpers import first_fresh_position

    from asymspec_vl import AsymSpecConfig

    for method in ("asymspec", "scd"):
        for seed in range(3):
            req = random_request(seed)
            free = tiny_vl.generate_batch(
                [req], method, AsymSpecConfig(K=2, max_new_tokens=16, ignore_eos=True)
            )[0]
            i = first_fresh_position(free.token_ids, 3 + seed)
            cfg = AsymSpecConfig(
                K=2, max_new_tokens=i + 1, stop_token_ids=(free.token_ids[i],)
            )
            expected = summary(tiny_vl.generate_batch([req], method, cfg))
            assert (
                expected[0][0] == free.token_ids[: i + 1] and expected[0][2] == "stop"
            )
            assert summary(vl.generate_batch([req], method, cfg)) == expected


def test_floor_runs_on_the_speculative_engine(vl, tiny_vl):
    """Mode "floor" on an asymspec engine (what a server holding one engine serves the Floor with): no drafts,
    the verifier's greedy tokens, as the transformers backend's Floor gives them."""
    from vllm import SamplingParams

    import vllm_patches
    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.backends.vllm.engine import generate
    from asymspec_vl.inputs.prompts import encode_request

    cfg = AsymSpecConfig(K=2, max_new_tokens=16)
    reqs = [random_request(s) for s in range(4)]
    expected = tiny_vl.generate_batch(reqs, "floor", cfg)
    llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
    encs = [encode_request(r, vl.pair.processor, vl.pair.tokenizer) for r in reqs]
    params = [
        SamplingParams(
            temperature=0,
            max_tokens=16,
            ignore_eos=True,
            stop_token_ids=sorted(vl.pair.stop_ids(cfg)),
            extra_args=vllm_patches.make_extra_args(
                "floor", cfg, banned=vl.pair.banned_ids()
            ),
        )
        for _ in encs
    ]
    outs = generate(llm, [{"prompt_token_ids": e.comp.ids} for e in encs], params)
    for o, ref in zip(outs, expected):
        info = o.kv_transfer_params["asymspec"]
        assert list(o.outputs[0].token_ids) == ref.token_ids
        assert (
            info["sources"] == ["verifier"] * len(ref.token_ids)
            and info["drafted"] == 0
        )
        assert info["steps"] == len(ref.token_ids) == ref.stats.steps
