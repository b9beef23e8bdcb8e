"""Looking inside a running asymspec engine (tests, benchmarks): counters and captured drafter logits.

Every function goes through LLM.collective_rpc, so it works with the engine in this process or in
worker processes; each returns the first worker's answer (all tensor-parallel ranks agree).
"""

from __future__ import annotations


def _proposer(worker):
    runner = getattr(worker, "model_runner", None) or worker.worker.model_runner
    return runner.drafter


def _counters(worker) -> dict:
    prop = _proposer(worker)
    return {"vision_tower_calls": prop.images.vision_tower_calls if prop.images is not None else 0,
            "live_requests": len(prop.rows), "free_full_view_blocks": len(prop.pool.free),
            "full_view_blocks": prop.pool.num_blocks - 1, "resumptions": prop.resumptions}


def _set_capture(worker, on: bool) -> None:
    _proposer(worker).capture = {} if on else None


def _captured(worker) -> dict:
    return dict(_proposer(worker).capture or {})


def _set_timing(worker, on: bool) -> None:
    from .timing import PhaseTimer

    runner = getattr(worker, "model_runner", None) or worker.worker.model_runner
    runner._asymspec_timer = PhaseTimer() if on else None


def _timing(worker) -> dict | None:
    runner = getattr(worker, "model_runner", None) or worker.worker.model_runner
    timer = getattr(runner, "_asymspec_timer", None)
    return timer.report() if timer is not None else None


def start_timing(llm) -> None:
    """Start (resetting) per-phase step timing: verifier, base_pass, gate, draft (see timing.py)."""
    llm.collective_rpc(_set_timing, args=(True,))


def stop_timing(llm) -> dict | None:
    """{"steps": engine steps, "seconds": {phase: total seconds}} since start_timing; timing off again."""
    report = llm.collective_rpc(_timing)[0]
    llm.collective_rpc(_set_timing, args=(False,))
    return report


def counters(llm) -> dict:
    """vision_tower_calls and resumptions after a preemption (cumulative), live_requests, free / total
    x_full KV blocks."""
    return llm.collective_rpc(_counters)[0]


def capture_full_view_logits(llm, on: bool = True) -> None:
    """Start (clearing) or stop recording each request's first x_full proposal."""
    llm.collective_rpc(_set_capture, args=(on,))


def captured_full_view_logits(llm) -> dict[str, dict]:
    """req_id -> {"x_full": ids from extra_args, "view": ids the drafter read, "drafts": d_1..d_K,
    "a": [K, V] float32 drafter logits at the draft positions} of the first proposal of each request."""
    return llm.collective_rpc(_captured)[0]
