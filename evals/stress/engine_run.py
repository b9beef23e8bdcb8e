"""A workload on one asymspec engine of the vLLM build: requests added at their arrival steps, each request's
output as the vLLM backend reads it, and the drafter logits a and b of every verification step (probe)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from asymspec_vl.backends.vllm.engine import EngineSpec
from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
from asymspec_vl.core.loop import RowOutput
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.request_plan import RequestPlan
from asymspec_vl.inputs.prompts import EncodedRequest
from vllm_patches.probes import probe

from .workload import RowSpec, Workload


@dataclass
class EngineRun:
    rows: list[
        RowOutput | None
    ]  # per RowSpec; None when the engine failed before the request finished
    steps: list[list[dict]] = field(
        default_factory=list
    )  # per row: probe.captured_step_logits entries
    resumptions: int = 0  # preempted requests resumed during the run
    error: str | None = None  # the engine failed: "ErrorType: message"


def engine_kwargs(workload: Workload, encs: list[EncodedRequest]) -> dict:
    """vllm.LLM arguments of the workload's engine; a preempting engine gets the KV blocks its largest request
    needs alone and a quarter of what the next max_num_seqs - 1 need."""
    e = workload.engine
    kwargs = {
        "block_size": e.block_size,
        "max_num_seqs": e.max_num_seqs,
        "enable_prefix_caching": e.prefix_caching,
    }
    if e.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = max(e.max_num_batched_tokens, e.max_num_seqs)
    if e.preempt:
        need = sorted(
            (
                -(-(len(enc.comp.ids) + r.max_new + e.K + 3) // e.block_size)
                for r, enc in zip(workload.rows, encs)
            ),
            reverse=True,
        )
        kwargs["num_gpu_blocks_override"] = (
            need[0] + 1 + sum(need[1 : e.max_num_seqs]) // 4
        )
    return kwargs


def full_view_tokens(workload: Workload, encs: list[EncodedRequest]) -> int | None:
    """ASYMSPEC_FULL_VIEW_TOKENS of a small x_full pool: about one and a half of the largest request's pool
    blocks (pool_blocks)."""
    e = workload.engine
    needs = [pool_blocks(r, enc, e) for r, enc in zip(workload.rows, encs)]
    if not (e.small_pool and any(needs)):
        return None
    blocks = max(needs)
    return (blocks + blocks // 2 + 2) * e.block_size


def pool_blocks(row: RowSpec, enc: EncodedRequest, e) -> int:
    """The x_full pool blocks a row can hold (vllm_patches scheduler_patch.full_view_blocks): its x_full view
    (asymspec) and, across a vocabulary map, its own x_comp view in the drafter's ids (every drafting method)."""
    views = [len(enc.full.ids)] if row.mode == "asymspec" else []
    if enc.drafter_comp is not None and row.mode in ("asymspec", "sd", "scd"):
        views.append(len(enc.drafter_comp.ids))
    return sum(-(-(n + row.max_new + e.K + 3) // e.block_size) for n in views)


@contextlib.contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def load_backend(
    workload: Workload, pair, paths: dict, encs: list[EncodedRequest]
) -> VLLMBackend:
    """The vLLM backend of the case's pair with its engine's knobs (float32, TP, compiled or eager, engine_kwargs);
    it starts no engine."""
    e = workload.engine
    return VLLMBackend.load(
        pair,
        str(paths["vl_drafter"]),
        str(paths["verifier"]),
        dtype="float32",
        tensor_parallel_size=e.tp,
        enforce_eager=not e.compiled,
        **engine_kwargs(workload, encs),
    )


def run_on_engine(
    workload: Workload,
    pair,
    paths: dict,
    encs: list[EncodedRequest],
    keep: int | None = None,
) -> EngineRun:
    """Start the workload's engine, serve its rows, shut it down. An engine failure is returned, not raised. keep:
    the verification steps whose logits are held per request (evenly spread, first and last among them; None:
    every step; 0: none recorded)."""

    e = workload.engine
    backend = load_backend(workload, pair, paths, encs)
    spec = EngineSpec(str(paths["verifier"]), str(paths["vl_drafter"]), e.K)
    tokens = full_view_tokens(workload, encs)
    llm = None
    try:
        with _env("ASYMSPEC_FULL_VIEW_TOKENS", str(tokens) if tokens else None):
            llm = backend.engine(spec)
        resumed = probe.counters(llm)["resumptions"]
        if keep != 0:
            probe.capture_step_logits(llm, keep=keep)
        items = [
            (r.arrival, f"stress-{i}", *_request(backend, r, enc))
            for i, (r, enc) in enumerate(zip(workload.rows, encs))
        ]
        run = EngineRun([None] * len(items), [[] for _ in items])
        try:
            finals = run_arrivals(
                llm,
                [
                    (arrival, rid, prompt, params)
                    for arrival, rid, prompt, params, _ in items
                ],
            )
        except Exception as err:  # the engine died: report it with the workload, go on with the next one
            run.error = f"{type(err).__name__}: {err}"
            return run
        for i, (_, rid, _, _, plan) in enumerate(items):
            run.rows[i] = VLLMBackend.row(finals[rid], plan, 0.0)
        captured = probe.captured_step_logits(llm) if keep != 0 else {}
        for req_id, entries in captured.items():
            rid = req_id.rsplit("-", 1)[
                0
            ]  # vLLM appends a suffix to the client's request id
            run.steps[int(rid.removeprefix("stress-"))] = entries
        run.resumptions = probe.counters(llm)["resumptions"] - resumed
        if keep != 0:
            probe.capture_step_logits(llm, on=False)
        return run
    finally:
        # nothing here may hold the engine while it closes: the close's collection would miss it and its model and
        # KV cache would wait for the interpreter's next full collection (1 GiB more resident after some cases)
        del llm
        backend.close()


def _request(
    backend: VLLMBackend, row: RowSpec, enc: EncodedRequest
) -> tuple[dict, object, RequestPlan]:
    """(prompt, SamplingParams, plan) of a row on the speculative engine (a plain row: the verifier's greedy
    tokens by vLLM's own sampler, read back as SD's)."""
    if row.mode != "plain":
        plan = backend.plan_request(METHODS[row.mode], row.cfg(), speculative=True)
        return (*backend.engine_request(enc, plan), plan)
    from vllm import SamplingParams  # lazy: loads vLLM

    return (
        {"prompt_token_ids": list(enc.comp.ids)},
        SamplingParams(
            temperature=0.0, max_tokens=row.max_new, ignore_eos=True, detokenize=False
        ),
        RequestPlan(METHODS["sd"], row.cfg(), mode="plain"),
    )


def run_arrivals(llm, items: list[tuple[int, str, dict, object]]) -> dict[str, object]:
    """Add each (arrival step, request id, prompt, params) at its step, step the engine until every request
    finished (idle stretches skipped). -> the final RequestOutput by request id. On failure every request
    still in the engine is aborted before the exception propagates."""
    engine = llm.llm_engine
    waiting = sorted(items, key=lambda item: item[0])
    done: dict[str, object] = {}
    step = 0
    try:
        while waiting or engine.has_unfinished_requests():
            if not engine.has_unfinished_requests():
                step = max(step, waiting[0][0])
            while waiting and waiting[0][0] <= step:
                _, rid, prompt, params = waiting.pop(0)
                engine.add_request(rid, prompt, params)
            for out in engine.step():
                if out.finished:
                    done[out.request_id] = out
            step += 1
    except BaseException:
        with contextlib.suppress(Exception):
            engine.abort_request([rid for _, rid, _, _ in items if rid not in done])
        raise
    return done
