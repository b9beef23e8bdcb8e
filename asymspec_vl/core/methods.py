"""What each decoding method is, in one table: which model reads which view, which rule decides, how its tokens
are labelled, which vLLM engine runs it. Both backends, the vLLM sampler, the statistics and the evals read
this table; adding a method means a row here, its rule in gate.py, its labels in trace.py, and its tests.

A step of every method (loop.py, Algorithm 1): the drafting source drafts K tokens greedily (none when the
method has no drafting source: one greedy token per step; at temperature > 0 each draft is drawn from its
filtered distribution and `sample` decides, sampling.py), every scoring source reads the pending tokens plus
the drafts in one forward, and the rule decides from the logits by name:
  a  the drafter on x_full (image + full text)     b  the drafter on x_comp (caption + OCR + question)
  t  the verifier on x_comp                        q  the drafter on x_question (image + question only)
  sd SD's drafter on x_comp (its drafting logits; None in a step without drafts, the vLLM sampler's)
The vLLM sampler also hands a sampled rule DRAFTED, the x_comp drafting pass's logits at the draft positions, where
the drafting source's name is a scored one (SCD's b: there b comes from the x_comp scoring pass, and lossless
sampling needs the exact distribution the drafts were drawn from).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import gate, method_names, sampling
from . import trace as T
from .config import AsymSpecConfig, is_one_of
from .errors import ConfigError
from .kernels import dispatch

DRAFTED = "drafted"  # the vLLM sampler's x_comp drafting logits where they are not the scored b (module docstring)

# decide(cfg, logits by name, drafts [B, K], banned [V] | None) -> StepOutcome
Rule = Callable[
    [AsymSpecConfig, dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None],
    gate.StepOutcome,
]
# sample(cfg, logits by name, drafts [B, K], banned, one torch.Generator per row) -> StepOutcome (temperature > 0,
# sampling.py; the drafts were drawn from the drafting source's filtered distribution)
SampledRule = Callable[
    [AsymSpecConfig, dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None, list],
    gate.StepOutcome,
]


@dataclass(frozen=True)
class Source:
    """One model reading one view; `logits` names what its logits are in the step."""

    model: str  # "drafter", "verifier", or "sd_drafter" (SD's text drafter: the VL drafter unless one is given)
    view: str  # "x_full", "x_comp" or "x_question"
    logits: str  # "a", "b", "t" or "q"


@dataclass(frozen=True)
class Method:
    name: str
    drafting: (
        Source | None
    )  # drafts greedily; None: no drafts, each step emits the scorer's greedy token
    scoring: tuple[
        Source, ...
    ]  # read pending + drafts in one forward, logits at the K+1 positions
    decide: Rule
    reads: tuple[str, ...]  # the logits the rule reads
    engine: str  # the vLLM engine that runs it: "verifier", "drafter" (VL model alone) or "speculative"
    sample: SampledRule  # the rule at temperature > 0
    fused_bonus_reads_last: bool = (
        False  # the drafting source also reads d_K when cfg.bonus == "fused"
    )
    always_reads_last: bool = (
        False  # ... always (its logits at position K+1 are part of the rule)
    )

    @property
    def labels(self) -> T.Labels:
        return T.LABELS[self.name]

    @property
    def speculative(self) -> bool:
        return self.drafting is not None

    @property
    def sources(self) -> tuple[Source, ...]:
        return ((self.drafting,) if self.drafting else ()) + self.scoring

    @property
    def views(self) -> tuple[str, ...]:
        """The views the method's models read (what must fit a context window)."""
        return tuple(dict.fromkeys(s.view for s in self.sources))

    @property
    def draft_view(self) -> str | None:
        """The view the drafting source drafts on; None for a method without drafts."""
        return self.drafting.view if self.drafting is not None else None

    @property
    def reads_image(self) -> bool:
        return any(view in ("x_full", "x_question") for view in self.views)

    def drafts_last(self, cfg: AsymSpecConfig) -> bool:
        """Whether the drafting source also reads d_K (its logits at position K+1 are needed)."""
        return self.always_reads_last or (
            self.fused_bonus_reads_last and cfg.bonus == "fused"
        )

    def __reduce__(self):
        """Pickled by name (its rule is a lambda): vLLM sends a parsed request to its worker processes."""
        return method, (self.name,)


DRAFTER_FULL = Source("drafter", "x_full", "a")
DRAFTER_COMP = Source("drafter", "x_comp", "b")
SD_DRAFTER = Source("sd_drafter", "x_comp", "sd")
VERIFIER = Source("verifier", "x_comp", "t")
DRAFTER_QUESTION = Source("drafter", "x_question", "q")

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "asymspec",
            DRAFTER_FULL,
            (DRAFTER_COMP, VERIFIER),
            lambda cfg, x, d, banned: dispatch.decide_asymspec(
                x["a"], x["b"], x["t"], d, cfg, banned
            ),
            ("a", "b", "t"),
            "speculative",
            lambda cfg, x, d, banned, g: sampling.sample_asymspec(
                x["a"], x["b"], x["t"], d, cfg, g, banned
            ),
            fused_bonus_reads_last=True,
        ),
        Method(
            "sd",
            SD_DRAFTER,
            (VERIFIER,),
            lambda cfg, x, d, banned: gate.decide_sd(x["t"], d, banned),
            ("t",),
            "speculative",
            lambda cfg, x, d, banned, g: sampling.sample_sd(
                x["t"], x.get("sd"), d, cfg, g, banned
            ),
        ),
        Method(
            "scd",
            DRAFTER_COMP,
            (VERIFIER,),
            lambda cfg, x, d, banned: gate.decide_scd(x["b"], x["t"], d, cfg, banned),
            ("b", "t"),
            "speculative",
            lambda cfg, x, d, banned, g: sampling.sample_scd(
                x["b"], x["t"], d, cfg, g, banned, x.get(DRAFTED)
            ),
            always_reads_last=True,
        ),
        Method(
            "floor",
            None,
            (VERIFIER,),
            lambda cfg, x, d, banned: gate.decide_sd(x["t"], d, banned),
            ("t",),
            "verifier",
            lambda cfg, x, d, banned, g: sampling.sample_sd(
                x["t"], None, d, cfg, g, banned
            ),
        ),
        Method(
            "drafter",
            None,
            (DRAFTER_QUESTION,),
            lambda cfg, x, d, banned: gate.decide_sd(x["q"], d, banned),
            ("q",),
            "drafter",
            lambda cfg, x, d, banned, g: sampling.sample_sd(
                x["q"], None, d, cfg, g, banned
            ),
        ),
    )
}
NAMES = tuple(METHODS)
assert NAMES == method_names.NAMES, (
    NAMES
)  # the command line's help lists method_names.NAMES
SPECULATIVE = tuple(name for name, m in METHODS.items() if m.speculative)
# the method of a speculative engine's request that names none (no extra_args["asymspec"]): SD's rule on the
# x_comp view, vLLM's stock speculative decoding
PLAIN_SPECULATIVE = METHODS["sd"]
# what a speculative engine (the verifier as target, the drafter as draft model) can run per request: every
# method whose models read x_full or x_comp (Floor: no drafts, the verifier's greedy tokens)
SPECULATIVE_ENGINE_MODES = tuple(
    name for name, m in METHODS.items() if "x_question" not in m.views
)
IMAGE_METHODS = tuple(name for name, m in METHODS.items() if m.reads_image)
assert IMAGE_METHODS == method_names.IMAGE_METHODS, IMAGE_METHODS


def method(name: str) -> Method:
    """The method called `name`; ConfigError naming the choices for anything else."""
    if not is_one_of(name, NAMES):
        raise ConfigError(f"method={name!r} is invalid: expected one of {NAMES}")
    return METHODS[name]


def engine_order(names: list[str]) -> list[str]:
    """`names` grouped by the vLLM engine each runs on, engines in order of first appearance, so that a run
    that goes method by method starts each engine once. SD goes first among the speculative methods: with a
    separate text drafter it has a speculative engine of its own."""
    first: dict[str, int] = {}
    for name in names:
        first.setdefault(method(name).engine, len(first))
    return sorted(names, key=lambda name: (first[method(name).engine], name != "sd"))
