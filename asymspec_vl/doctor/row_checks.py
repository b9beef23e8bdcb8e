"""Checks of `asymspec-vl doctor` on the rows of one speculative engine, as a server fills them: waves of mixed
asymspec / scd / sd requests (each equal to the same request alone on transformers), and a plain request that
samples and asks for logprobs."""

from __future__ import annotations

import itertools
import math

from ..backends.vllm.engine import generate
from ..core.config import AsymSpecConfig
from ..inputs.prompts import encode_request
from .backends import AttentionRun
from .cases import Check, compare, requests

IN_FLIGHT = 4  # requests in the engine at once: each finished one frees a row the next request takes
_wave_ids = itertools.count()


def mixed_jobs():
    """(request, method, K, max_new_tokens) for three waves over the doctor's requests: every method at K 2 and
    4 (the engine's) and answers of different lengths, so rows finish at different steps."""
    methods, jobs = ("asymspec", "scd", "sd"), []
    for wave, row in itertools.product(range(3), range(len(requests()))):
        jobs.append(
            (
                row,
                methods[(wave + row) % 3],
                2 + 2 * ((wave + row) % 2),
                8 + 8 * ((row + 2 * wave) % 3),
            )
        )
    return jobs


def mixed_waves_check(vl, hf, run: AttentionRun) -> Check:
    reqs, jobs = requests(), mixed_jobs()
    encoded = [encode_request(r, vl.pair.processor, vl.pair.tokenizer) for r in reqs]
    backend = vl.backend
    llm = backend.engine(backend.engine_for("asymspec", 4)[0])
    configs = [AsymSpecConfig(K=K, max_new_tokens=n) for _, _, K, n in jobs]
    plans = [
        backend.plan_request(method, cfg)
        for (_, method, _, _), cfg in zip(jobs, configs)
    ]
    engine_jobs = [
        backend.engine_request(encoded[row], plan)
        for (row, _, _, _), plan in zip(jobs, plans)
    ]
    finals = run_in_waves(llm, engine_jobs, IN_FLIGHT)
    got = [backend.row(o, plan, 0.0) for plan, o in zip(plans, finals)]
    expected = [
        hf.generate_batch([reqs[row]], method, cfg)[0]
        for (row, method, _, _), cfg in zip(jobs, configs)
    ]
    check = compare("mixed sd/scd/asymspec waves (rows reused)", run, got, expected)
    return Check(
        check.name,
        check.backend,
        check.result,
        f"{len(jobs)} requests, {IN_FLIGHT} at a time; {check.detail}",
    )


def run_in_waves(llm, jobs: list[tuple[dict, object]], in_flight: int) -> list:
    """Keep `in_flight` requests in the engine: each time one finishes the next is added (it takes the freed
    row). The final RequestOutputs in job order; on an error the requests still running are aborted."""
    engine, wave = llm.llm_engine, next(_wave_ids)
    ids = [f"doctor-{wave}-{i}" for i in range(len(jobs))]
    pending, done, live = list(range(len(jobs))), {}, set()
    try:
        while pending or live:
            while pending and len(live) < in_flight:
                i = pending.pop(0)
                engine.add_request(ids[i], *jobs[i])
                live.add(ids[i])
            for o in engine.step():
                if o.finished and o.request_id in live:
                    live.discard(o.request_id)
                    done[ids.index(o.request_id)] = o
    except BaseException:
        engine.abort_request(sorted(live))
        raise
    return [done[i] for i in range(len(jobs))]


def plain_sampling_check(vl, run: AttentionRun) -> Check:
    """A request without extra_args that samples (temperature 0.8) and asks for 2 logprobs per token, on the
    asymspec engine: vLLM's own sampler decides it, and its logprobs must come back (a server indexes them)."""
    from vllm import SamplingParams  # lazy: loads vLLM

    from vllm_patches.version import is_cpu_build  # lazy: loads torch

    name = "plain request: sampling + logprobs"
    if is_cpu_build():
        return Check(
            name,
            run.label,
            "skipped",
            "the CPU build decodes speculative rows greedily and fails a "
            "sampling request (the stock rejection sampler needs a GPU)",
        )
    backend = vl.backend
    llm = backend.engine(backend.engine_for("asymspec", 4)[0])
    enc = encode_request(requests()[0], vl.pair.processor, vl.pair.tokenizer)
    params = SamplingParams(
        temperature=0.8, top_p=0.95, seed=0, max_tokens=16, ignore_eos=True, logprobs=2
    )
    (output,) = generate(llm, [{"prompt_token_ids": list(enc.comp.ids)}], [params])
    return logprobs_verdict(output, name, run.label)


def logprobs_verdict(output, name: str, backend: str) -> Check:
    """Every sampled token of a vLLM RequestOutput has its logprobs entry, holding that token with a finite,
    non-positive logprob."""

    completion = output.outputs[0]
    tokens, logprobs = list(completion.token_ids), completion.logprobs
    if completion.finish_reason not in ("stop", "length"):
        return Check.of(
            name,
            backend,
            False,
            f"the request finished with {completion.finish_reason!r}",
        )
    if not tokens:
        return Check.of(name, backend, False, "no token was sampled")
    if not logprobs:
        return Check.of(
            name,
            backend,
            False,
            f"no logprobs came back for {len(tokens)} sampled tokens: the asymspec "
            f"sampler dropped them (vLLM's chat server then answers HTTP 500)",
        )
    if len(logprobs) != len(tokens):
        return Check.of(
            name,
            backend,
            False,
            f"{len(logprobs)} logprobs entries for {len(tokens)} sampled tokens",
        )
    for j, (token, entry) in enumerate(zip(tokens, logprobs)):
        value = entry[token].logprob if token in entry else None
        if value is None or not math.isfinite(value) or value > 0:
            return Check.of(
                name,
                backend,
                False,
                f"token {j} ({token}): its logprob is missing or invalid: {entry}",
            )
    return Check.of(
        name, backend, True, f"{len(tokens)} sampled tokens, each with its logprob"
    )
