"""Checks of `asymspec-vl doctor`: asymspec with the drafter's compiled passes (on CUDA their PIECEWISE CUDA graphs)
against the same engine with them switched off, on one attention backend: tokens, sources and step counts equal
(required in float32), and the drafter's logits a (x_full) and b (x_comp) equal to the run's precision.

The two runs share one engine (the verifier compiled, with its graphs, in both), so they differ in the drafter's
passes alone; its prefix cache is reset before each run, so neither reads prompt KV the other wrote (the eager run
reusing the compiled run's KV would hide damage there); the eager one takes the path the speculative config's
enforce_eager selects
(vllm_patches/hooks/graph_switch.py). Tolerances, max |graphs - eager| / max |eager| over each proposal's logits:
float32 1e-4 (the same kernels, only inductor's fusions reorder float32 sums: ~1e-6); bf16 0.05, the bound the
logits checks hold vLLM to against transformers (logits.py): a graph and an eager pass run the same attention
kernel on the same KV, and differ where inductor keeps a fused chain in float32 registers instead of rounding
each op to bf16 (u = 2^-8 a rounding, a few per layer) or a padded size picks another GEMM tiling; a graph
replaying another pass's inputs (stale positions, embeddings, slots, another size's graph) is off by the
logits' own size, ~1.
"""

from __future__ import annotations

from ..core.config import AsymSpecConfig
from .backends import AttentionRun
from .cases import Check, compare, requests
from .logits import BF16_LOGIT_TOLERANCE, FP32_LOGIT_TOLERANCE, relative_difference

TOKENS = "drafter graphs: tokens == eager"
LOGITS = "drafter graphs: a and b == eager"
NAMES = [TOKENS, LOGITS]
K = 2
MAX_NEW_TOKENS = 24


def graphs_checks(vl, run: AttentionRun, compiled_vl=None) -> list[Check]:
    """Both rows on vl's asymspec engine where its drafter is compiled; else on compiled_vl() (a backend built
    with enforce_eager=False, closed here), as on the CPU build, whose engines default to eager."""
    from vllm_patches.probes import probe  # lazy: loads torch

    llm = vl.backend.engine(vl.backend.engine_for("asymspec", K)[0])
    if probe.drafter_graphs(llm)["compiled"] or compiled_vl is None:
        return _graphs_checks(vl, llm, run)
    own = compiled_vl()
    try:
        return _graphs_checks(
            own, own.backend.engine(own.backend.engine_for("asymspec", K)[0]), run
        )
    finally:
        own.backend.close()


def _graphs_checks(vl, llm, run: AttentionRun) -> list[Check]:
    from vllm_patches.probes import probe  # lazy: loads torch

    state = probe.drafter_graphs(llm)
    if not state["compiled"]:
        return [
            Check.of(
                name,
                run.label,
                False,
                "the engine's drafter runs eagerly (engine or speculative config "
                "enforce_eager): nothing to compare",
            )
            for name in NAMES
        ]
    reqs, cfg, runs = requests(), AsymSpecConfig(K=K, max_new_tokens=MAX_NEW_TOKENS), {}
    try:
        for on in (True, False):
            # each run from an empty prefix cache: the eager run reusing prompt KV the compiled run wrote would
            # hide damage there (issue 32, finding 6)
            llm.reset_prefix_cache()
            probe.drafter_graphs(llm, on)
            probe.capture_full_view_logits(llm)
            results = vl.generate_batch(reqs, "asymspec", cfg)
            runs[on] = (
                results,
                probe.captured_proposals(llm),
                probe.drafter_graphs(llm)["passes"],
            )
    finally:
        probe.capture_full_view_logits(llm, on=False)
        probe.drafter_graphs(llm, True)
    (got, got_logits, passes), (eager, eager_logits, eager_passes) = (
        runs[True],
        runs[False],
    )
    where = (
        f"drafter mode {state['cudagraph_mode']}, graphs at {_sizes(state['capture_sizes'])}"
        if state["graphs"]
        else "compiled, no CUDA graphs (drafter mode NONE)"
    )
    passes_detail = f"{passes['compiled']} passes compiled, {passes['replayed']} replayed a graph; {where}"
    tokens = compare(TOKENS, run, got, eager)
    problem = passes_problem(passes, eager_passes, state["graphs"])
    tokens = Check(
        tokens.name,
        tokens.backend,
        "failed" if problem else tokens.result,
        f"{problem or passes_detail}; {tokens.detail}",
    )
    return [tokens, logits_check(got_logits, eager_logits, run)]


def passes_problem(passes: dict, eager_passes: dict, graphs: bool) -> str | None:
    """Why the two runs do not compare graphs with eager, or None."""
    if not passes["compiled"]:
        return "no drafter pass ran compiled with the graphs on"
    if eager_passes["compiled"]:
        return f"{eager_passes['compiled']} drafter passes ran compiled with the graphs off"
    if graphs and not passes["replayed"]:
        return f"graphs were captured but none of {passes['compiled']} compiled passes replayed one"
    return None


def logits_check(got: dict, eager: dict, run: AttentionRun) -> Check:
    """a and b of the graphs run against the eager run's, proposal by proposal, where both read the same tokens
    (a: the same committed y and drafts; b: the same x_comp + y + drafts). In float32 every proposal must match."""
    tolerance = FP32_LOGIT_TOLERANCE if run.exact else BF16_LOGIT_TOLERANCE
    by_view = {c["x_full"]: c for c in eager.values()}
    worst, compared, unmatched, total = {"a": 0.0, "b": 0.0}, {"a": 0, "b": 0}, 0, 0
    for c in got.values():
        ref = by_view.get(c["x_full"], {"a": [], "b": []})
        for kind in ("a", "b"):
            refs = {_read(kind, p): p[kind] for p in ref[kind]}
            for p in c[kind]:
                total += 1
                r = refs.get(_read(kind, p))
                if r is None:
                    unmatched += 1
                    continue
                worst[kind] = max(worst[kind], relative_difference(p[kind], r.float()))
                compared[kind] += 1
    detail = (
        f"max relative difference a {worst['a']:.2e}, b {worst['b']:.2e} (tolerance {tolerance:g}) over "
        f"{compared['a']} + {compared['b']} proposals of {len(got)} requests"
    )
    if unmatched:
        detail += (
            f"; {unmatched} of {total} drafted on other tokens than the eager run's"
        )
    if not compared["a"] or not compared["b"]:
        return Check.of(LOGITS, run.label, False, "no a or no b to compare; " + detail)
    exact_miss = run.exact and unmatched
    return Check.of(
        LOGITS, run.label, not exact_miss and max(worst.values()) <= tolerance, detail
    )


def _read(kind: str, proposal: dict) -> tuple:
    """The tokens a proposal's logits were computed on (besides its view): a, y and the drafts; b, all of them."""
    if kind == "a":
        return tuple(proposal["y"]), tuple(proposal["drafts"])
    return tuple(proposal["tokens"])


def _sizes(sizes: list[int]) -> str:
    return (
        f"{len(sizes)} sizes {sizes[0]}..{sizes[-1]}" if len(sizes) > 3 else str(sizes)
    )
