"""The drafter alone's rows of a workload on its plain drafter engine (VLLMBackend.engine_for's, built with the case's
block size, token budget, max_num_seqs, prefix caching, compilation and TP), served as a user's are: the backend's
plan, prompt and SamplingParams, and its row, which moves an answer across a map to the verifier's ids
(drafter_answer.py)."""

from __future__ import annotations

from dataclasses import replace

from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.methods import METHODS
from asymspec_vl.inputs.prompts import EncodedRequest

from .engine_run import EngineRun, load_backend, run_arrivals, run_on_engine
from .workload import DRAFTER, Workload


def run_drafter(
    workload: Workload, pair, paths: dict, encs: list[EncodedRequest]
) -> EngineRun:
    """Start the drafter's plain engine, serve the workload's rows (all drafter rows) at their arrival steps, shut it
    down. The speculative engine's preemption and x_full pool do not apply to it. An engine failure is returned."""
    e = workload.engine
    if any(r.mode != DRAFTER for r in workload.rows):
        raise ConfigError("run_drafter serves drafter rows only")
    backend = load_backend(
        replace(workload, engine=replace(e, preempt=False)), pair, paths, encs
    )
    plans = [backend.plan_request(METHODS[DRAFTER], r.cfg()) for r in workload.rows]
    run = EngineRun([None] * len(plans), [[] for _ in plans])
    llm = None
    try:
        llm = backend.engine(plans[0].engine)
        items = [
            (r.arrival, f"drafter-{i}", *backend.engine_request(enc, plan))
            for i, (r, enc, plan) in enumerate(zip(workload.rows, encs, plans))
        ]
        try:
            finals = run_arrivals(llm, items)
        except Exception as err:  # the engine died: report it with the workload
            run.error = f"{type(err).__name__}: {err}"
            return run
        run.rows = [
            VLLMBackend.row(finals[f"drafter-{i}"], plan, 0.0, pair.vmap)
            for i, plan in enumerate(plans)
        ]
        return run
    finally:
        del (
            llm
        )  # nothing may hold the engine while it closes (engine_run.run_on_engine)
        backend.close()


def run_engines(
    workload: Workload,
    pair,
    paths: dict,
    encs: list[EncodedRequest],
    keep: int | None = None,
) -> EngineRun:
    """The case's rows on their engines: the speculative engine's (engine_run.run_on_engine, its step logits held
    for `keep` steps a request) first, closed, then the drafter rows on the drafter's (run_drafter); one EngineRun
    in the workload's row order, an engine's failure named. An engine with no rows of the workload is not
    started."""
    own = [i for i, r in enumerate(workload.rows) if r.mode == DRAFTER]
    rest = [i for i in range(len(workload.rows)) if i not in own]
    out = EngineRun([None] * len(workload.rows), [[] for _ in workload.rows])
    errors = []
    for indices, runner, kw, name in (
        # its failure reads as before the drafter rows
        (rest, run_on_engine, {"keep": keep}, None),
        (own, run_drafter, {}, "drafter engine"),
    ):
        if not indices:
            continue
        part = replace(workload, rows=tuple(workload.rows[i] for i in indices))
        run = runner(part, pair, paths, [encs[i] for i in indices], **kw)
        for j, i in enumerate(indices):
            out.rows[i], out.steps[i] = run.rows[j], run.steps[j]
        out.resumptions += run.resumptions
        if run.error:
            errors.append(f"{name}: {run.error}" if name else run.error)
    out.error = " | ".join(errors) or None
    return out
