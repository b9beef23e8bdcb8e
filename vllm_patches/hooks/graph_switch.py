"""The drafter's compiled passes switched off and on in a running engine, and counted (for `asymspec-vl doctor`:
the same engine's tokens and logits with the drafter's graphs and without them). Installed from outside, at the
first switch, on that engine's proposer alone (the doctor's engines): no other engine's path carries the count.

Off, every drafter pass takes the eager path the speculative config's enforce_eager selects (comp_view.score and
drafter_pass.run_pass read `graphs.enabled`); the verifier keeps its compilation and graphs, so the two runs differ
in the drafter's passes alone.
"""

from __future__ import annotations

from vllm_patches.drafter.drafter_graphs import is_compiled


def switch(proposer, on: bool | None = None) -> dict:
    """Switch the drafter's compiled passes on or off (on: only a drafter compiled at load) and reset the pass
    counts; with on=None only report. -> {"compiled", "cudagraph_mode", "capture_sizes", "passes": {"compiled":
    passes that ran the compiled model since the last switch, "replayed": of those, passes that replayed a CUDA
    graph}}."""
    from vllm.config import CUDAGraphMode  # lazy: loads vLLM

    graphs = proposer.graphs
    if on is not None:
        if on and not (
            graphs.enabled or (not graphs.enforce_eager and is_compiled(graphs.model))
        ):
            raise RuntimeError(
                "the drafter was loaded eagerly (enforce_eager): its compiled passes cannot be "
                "switched on"
            )
        graphs.enabled = on
        _count(graphs)
    dispatcher = graphs.dispatcher
    sizes = sorted(
        {d.num_tokens for keys in dispatcher.cudagraph_keys.values() for d in keys}
    )
    counts = graphs.__dict__.get("_doctor_counts", {"compiled": 0, "replayed": 0})
    return {
        "compiled": bool(graphs.enabled),
        "cudagraph_mode": dispatcher.cudagraph_mode.name,
        "capture_sizes": sizes,
        "passes": dict(counts),
        "graphs": dispatcher.cudagraph_mode != CUDAGraphMode.NONE,
    }


def _count(graphs) -> None:
    """From now on count graphs.forward's passes (an instance attribute over the class's method, so a class-level
    change of forward, a test's injected fault, still runs)."""
    counts = {"compiled": 0, "replayed": 0}

    def forward(token_ids, *args, **kwargs):
        counts["compiled"] += 1
        counts["replayed"] += int(graphs.replays(token_ids.shape[0]))
        return type(graphs).forward(graphs, token_ids, *args, **kwargs)

    graphs._doctor_counts = counts
    graphs.forward = forward
