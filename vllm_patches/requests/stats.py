"""Per-request acceptance statistics of an asymspec engine: counted by the scheduler, returned with the
output in RequestOutput.kv_transfer_params["asymspec"] (the one free-form per-request field vLLM 0.19
carries from the engine core to the client, and into OpenAI-server responses).

The counters are asymspec_vl.core.trace.Stats, counted with its `record`, and every emitted token is labelled by
trace.step_sources with the method's labels (methods.py / trace.LABELS), as the decoding loop labels them.
"""

from __future__ import annotations

from asymspec_vl.core import trace as T
from asymspec_vl.core.methods import METHODS

OUTPUT_KEY = "asymspec"


def labels(mode: str) -> T.Labels:
    """The labels of a speculative engine's mode; plain speculative decoding labels like SD."""
    return T.LABELS[mode if mode in T.LABELS else "sd"]


class EngineStats:
    """Statistics and token labels of one request, step by step."""

    def __init__(self, K: int, mode: str):
        self.mode = mode
        drafts = (
            mode not in METHODS or METHODS[mode].speculative
        )  # Floor drafts nothing: no draft positions
        self.stats = T.Stats(accepted_at=[0] * (K if drafts else 0))
        self.sources: list[str] = []

    def record(self, num_drafts: int, num_generated: int, num_emitted: int) -> None:
        """One engine step: num_drafts verified, num_generated = accepted + 1 committed, num_emitted kept
        after the stop / length cut."""
        if (
            num_drafts == 0
        ):  # Floor, or no drafts fitted (near max_model_len): the verifier's greedy token
            self.sources += [T.VERIFIER] * num_emitted
            self.stats.record(0, 0, num_emitted)
            return
        num_accepted = num_generated - 1
        self.sources += T.step_sources(labels(self.mode), num_drafts, num_accepted)[
            :num_emitted
        ]
        self.stats.record(num_drafts, num_accepted, num_emitted)

    def to_dict(self) -> dict:
        s = self.stats
        return {
            "mode": self.mode,
            "steps": s.steps,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "emitted": s.emitted,
            "accepted_at": list(s.accepted_at),
            "sources": list(self.sources),
            "acceptance_rate": s.acceptance_rate,
            "mean_accepted_length": s.mean_accepted_length,
            "acceptance_per_position": s.acceptance_per_position,
        }


def from_output(
    kv_transfer_params: dict | None,
) -> tuple[T.Stats, list[str], str | None]:
    """Client side: (Stats, per-token sources, error message or None) of a finished request."""
    d = (kv_transfer_params or {}).get(OUTPUT_KEY) or {}
    stats = T.Stats(
        steps=d.get("steps", 0),
        drafted=d.get("drafted", 0),
        accepted=d.get("accepted", 0),
        emitted=d.get("emitted", 0),
        accepted_at=list(d.get("accepted_at", [])),
    )
    return stats, list(d.get("sources", [])), d.get("error")
