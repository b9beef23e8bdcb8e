"""Per-request acceptance statistics of an asymspec engine: counted by the scheduler, returned with the
output in RequestOutput.kv_transfer_params["asymspec"] (the one free-form per-request field vLLM 0.19
carries from the engine core to the client, and into OpenAI-server responses).

The counts are those of asymspec_vl.trace.Stats; `sources` labels every emitted token as the decoding loop
does (draft / fused / bonus for AsymSpec; draft / verifier / bonus for SD; draft / contrastive for SCD).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asymspec_vl import loop
from asymspec_vl import trace as T
from asymspec_vl.config import AsymSpecConfig

OUTPUT_KEY = "asymspec"


def labels(mode: str) -> tuple[str, str, str]:
    """(accepted draft, token at a rejection, token after all passed) as the decoding loop's plans label them;
    plain speculative decoding labels like SD."""
    cfg = AsymSpecConfig()
    if mode == "asymspec":
        return loop.plan_asymspec(cfg, None, None, None, None).labels
    if mode == "scd":
        return loop.plan_scd(cfg, None, None, None).labels
    return loop.plan_sd(cfg, None, None, None).labels


@dataclass
class EngineStats:
    K: int
    mode: str
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    accepted_at: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.accepted_at = [0] * self.K

    def record(self, num_drafts: int, num_generated: int, num_emitted: int) -> None:
        """One engine step: num_drafts verified, num_generated = accepted + 1 committed, num_emitted kept
        after the stop / length cut."""
        if num_drafts == 0:  # a step without drafts (near max_model_len)
            self.sources += [T.VERIFIER] * num_emitted
            self.emitted += num_emitted
            return
        n_acc = num_generated - 1
        self.steps += 1
        self.drafted += num_drafts
        self.accepted += n_acc
        for i in range(n_acc):
            self.accepted_at[i] += 1
        accepted, rejected, bonus = labels(self.mode)
        self.sources += ([accepted] * n_acc + [bonus if n_acc == num_drafts else rejected])[:num_emitted]
        self.emitted += num_emitted

    def to_dict(self) -> dict:
        s = T.Stats(self.steps, self.drafted, self.accepted, self.emitted, list(self.accepted_at))
        return {"mode": self.mode, "steps": self.steps, "drafted": self.drafted, "accepted": self.accepted,
                "emitted": self.emitted, "accepted_at": list(self.accepted_at), "sources": list(self.sources),
                "acceptance_rate": s.acceptance_rate, "mean_accepted_length": s.mean_accepted_length,
                "acceptance_per_position": s.acceptance_per_position}


def from_output(kv_transfer_params: dict | None) -> tuple[T.Stats, list[str], str | None]:
    """Client side: (Stats, per-token sources, error message or None) of a finished request."""
    d = (kv_transfer_params or {}).get(OUTPUT_KEY) or {}
    stats = T.Stats(steps=d.get("steps", 0), drafted=d.get("drafted", 0), accepted=d.get("accepted", 0),
                    emitted=d.get("emitted", 0), accepted_at=list(d.get("accepted_at", [])))
    return stats, list(d.get("sources", [])), d.get("error")
