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


@dataclass(frozen=True)
class Labels:
    """How a method labels the tokens one step commits."""

    accepted: str  # each accepted draft
    rejected: str  # the token emitted at the first rejection
    all_passed: str  # the token emitted after every draft passed (the bonus position)


# method -> its labels (methods.py names the methods)
LABELS = {
    "asymspec": Labels(DRAFT, FUSED, BONUS),
    "sd": Labels(DRAFT, VERIFIER, BONUS),
    "scd": Labels(DRAFT, CONTRASTIVE, CONTRASTIVE),
    "floor": Labels(VERIFIER, VERIFIER, VERIFIER),
    "drafter": Labels(DRAFTER, DRAFTER, DRAFTER),
}


def step_sources(labels: Labels, num_drafts: int, num_accepted: int) -> list[str]:
    """The labels of one step's committed tokens: the accepted drafts, then the token after them."""
    return [labels.accepted] * num_accepted + [
        labels.all_passed if num_accepted == num_drafts else labels.rejected
    ]


@dataclass
class Stats:
    """Counters of one request. acceptance_rate = accepted / drafted; mean_accepted_length = emitted / steps."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    accepted_at: list[int] = field(
        default_factory=list
    )  # [K]: steps whose i-th draft was accepted
    elapsed_s: float = 0.0

    def record(self, num_drafts: int, num_accepted: int, num_emitted: int) -> None:
        """Count one speculation step: num_drafts verified, num_accepted of them kept, num_emitted tokens
        committed (num_accepted + 1, fewer when a stop token or the budget cut the step)."""
        self.steps += 1
        self.drafted += num_drafts
        self.accepted += num_accepted
        for i in range(num_accepted):
            self.accepted_at[i] += 1
        self.emitted += num_emitted

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted; None where nothing was drafted (floor, the drafter alone)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """emitted / steps (tokens per verifier pass); None where nothing was drafted."""
        return self.emitted / self.steps if self.drafted and self.steps else None

    @property
    def tokens_per_s(self) -> float | None:
        """emitted / elapsed_s of the decoding (the prompts' prefill included); None before any time passed."""
        return self.emitted / self.elapsed_s if self.elapsed_s > 0 else None

    def __repr__(self) -> str:
        def shown(x, digits):
            return "None" if x is None else f"{x:.{digits}f}"

        return (
            f"Stats(emitted={self.emitted}, steps={self.steps}, acceptance_rate="
            f"{shown(self.acceptance_rate, 2)}, mean_accepted_length={shown(self.mean_accepted_length, 2)}, "
            f"tokens_per_s={shown(self.tokens_per_s, 1)}, elapsed_s={self.elapsed_s:.3f})"
        )

    @property
    def acceptance_per_position(self) -> list[float]:
        return [n / self.steps if self.steps else 0.0 for n in self.accepted_at]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            tokens_per_s=self.tokens_per_s,
            acceptance_per_position=self.acceptance_per_position,
        )
        return d
