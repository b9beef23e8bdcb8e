"""Per-token provenance and per-request statistics of a decoding run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Where a committed token came from.
DRAFT = "draft"  # a drafter token the gate accepted
FUSED = "fused"  # argmax(t + beta * delta) at the first rejection
BONUS = "bonus"  # the verifier's token after K accepted drafts
VERIFIER = "verifier"  # the verifier's own greedy token (floor; SD at a mismatch)
DRAFTER = "drafter"  # the drafter's own greedy token (drafter-alone baseline)
CONTRASTIVE = "contrastive"  # SCD's contrastive token at a mismatch or bonus position
TOKEN_SOURCES = (DRAFT, FUSED, BONUS, VERIFIER, DRAFTER, CONTRASTIVE)


@dataclass
class Stats:
    """Counters of one request. acceptance_rate = accepted / drafted; mean_accepted_length = emitted / steps."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    accepted_at: list[int] = field(default_factory=list)  # [K]: steps whose i-th draft was accepted
    elapsed_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.emitted / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        return [n / self.steps if self.steps else 0.0 for n in self.accepted_at]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(acceptance_rate=self.acceptance_rate, mean_accepted_length=self.mean_accepted_length,
                 tokens_per_s=self.tokens_per_s, acceptance_per_position=self.acceptance_per_position)
        return d
