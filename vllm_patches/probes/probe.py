"""Looking inside a running asymspec engine (tests, benchmarks, `asymspec-vl doctor`): counters, captured
drafter logits, phase timing.

Every function calls a named worker method (worker_extension.py) through LLM.collective_rpc, so it works with
the engine in this process or in worker processes, multiprocessing included, without sending a function;
each returns the first worker's answer (all tensor-parallel ranks agree).
"""

from __future__ import annotations

from ..requests.request_args import unpack_tensor

LOGITS = ("t", "a", "b", "q")  # a captured step's logits (harness.py's steps)


def start_timing(llm) -> None:
    """Start (resetting) per-phase step timing: verifier, base_pass, gate, draft (see phase_timing.py)."""
    llm.collective_rpc("asymspec_set_timing", args=(True,))


def stop_timing(llm) -> dict | None:
    """{"steps": engine steps, "seconds": {phase: total seconds}} since start_timing; timing off again."""
    report = llm.collective_rpc("asymspec_timing")[0]
    llm.collective_rpc("asymspec_set_timing", args=(False,))
    return report


def counters(llm) -> dict:
    """vision_tower_calls and resumptions after a preemption (cumulative), live_requests, free / total
    x_full KV blocks and their size, the engine's K, the drafter's attention builders."""
    return llm.collective_rpc("asymspec_counters")[0]


def capture_full_view_logits(llm, on: bool = True) -> None:
    """Start (clearing) or stop recording each request's first proposals: a and b (harness.py)."""
    llm.collective_rpc("asymspec_set_capture", args=(on,))


def captured_proposals(llm) -> dict[str, dict]:
    """req_id -> {"x_full": ids from extra_args, "view": ids the drafter read as x_full's prompt,
    "a": [{"y": committed tokens, "drafts": d_1..d_K, "a": [K, V]}, ...] (x_full rows),
    "b": [{"tokens": x_comp + y + drafts, "b": [n+1, V]}, ...] (rows whose rule reads b)}, float32, the first
    harness.MAX_PROPOSALS of each."""

    captured = llm.collective_rpc("asymspec_captured")[0]
    return {
        req_id: {
            **c,
            "x_full": tuple(c["x_full"] or ()),
            "view": tuple(c["view"] or ()),
            "a": [{**p, "a": unpack_tensor(p["a"], "a")} for p in c["a"]],
            "b": [{**p, "b": unpack_tensor(p["b"], "b")} for p in c["b"]],
        }
        for req_id, c in captured.items()
    }  # msgpack turns tuples into lists; tensors travel packed


def captured_full_view_logits(llm) -> dict[str, dict]:
    """req_id -> {"x_full": ids from extra_args, "view": ids the drafter read, "drafts": d_1..d_K,
    "a": [K, V] float32 drafter logits at the draft positions} of the first proposal of each x_full request."""
    return {
        req_id: {
            "x_full": c["x_full"],
            "view": c["view"],
            "drafts": c["a"][0]["drafts"],
            "a": c["a"][0]["a"],
        }
        for req_id, c in captured_proposals(llm).items()
        if c["a"]
    }


def capture_step_logits(llm, on: bool = True, keep: int | None = None) -> None:
    """Start (clearing) or stop recording, at every verification step, the drafter logits a and b the rule read
    (harness.py); keep: at most this many steps held per request, evenly spread, the first and the latest among
    them (None: every step)."""
    llm.collective_rpc("asymspec_set_step_capture", args=(on, keep))


def captured_step_logits(llm) -> dict[str, list[dict]]:
    """req_id -> per verification step held {"step": its index, "y": committed output before it, "drafts": d_1..d_n,
    "t": [n+1, Vv],
    "b": [n+1, V], "a": [m, V], "q": [n, V]} (float32; t always, a, b where the request's rule reads them, q for a
    sampling sd / scd row: harness.py) since capture_step_logits."""

    captured = llm.collective_rpc("asymspec_step_captured")[0]
    return {
        req_id: [
            {k: unpack_tensor(v, k) if k in LOGITS else v for k, v in entry.items()}
            for entry in entries
        ]
        for req_id, entries in captured.items()
    }


def drafter_graphs(llm, on: bool | None = None) -> dict:
    """Switch the drafter's compiled passes on or off (None: leave them); {"compiled", "cudagraph_mode",
    "capture_sizes", "graphs", "passes": {"compiled", "replayed"} since the last switch} (hooks/graph_switch.py)."""
    return llm.collective_rpc("asymspec_drafter_graphs", args=(on,))[0]


def profile_vision_tower(llm) -> list[int] | None:
    """Run the drafter's vision tower on its largest image (as the profile run does); that image's grid."""
    return llm.collective_rpc("asymspec_profile_vision_tower")[0]
