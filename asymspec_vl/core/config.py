"""AsymSpecConfig: the decoding hyper-parameters (K, beta, gamma, gate, delta source, bonus rule), validated."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from .errors import ConfigError
from .structured import StructuredOutput, structured_output_of

GATES = ("cda", "fixed", "lambda", "kl")
DELTA_SOURCES = ("contrastive", "raw", "scd")
BONUS_RULES = ("verifier", "fused")


@dataclass(frozen=True)
class AsymSpecConfig:
    """Hyper-parameters of one decoding run.

    gate:   "cda"    gamma_eff = gamma * exp(-JSD(a || b))       (the paper's CDA gate)
            "fixed"  gamma_eff = gamma
            "lambda" gamma_eff = gamma * exp(-lam * Delta),  Delta = log p_a(d) - log p_b(d)
            "kl"     gamma_eff = gamma * exp(-KL(a || b))
    delta_source: "contrastive" delta = a - b (the paper), "raw" delta = a, "scd" delta = t - b
    bonus:  "verifier" argmax(t_{K+1}) (the paper), "fused" argmax(t_{K+1} + beta * delta_{K+1})
    scd_alpha, beta: the SCD baseline's plausibility cut and contrast weight (Appendix B).
    stop_token_ids: the tokens that end an answer (None: the verifier's EOS tokens); an empty list is refused
            (it would silently run every answer to max_new_tokens): say that with ignore_eos=True, which
            drops the verifier's EOS tokens (as vLLM's SamplingParams.ignore_eos). to_dict() shows ignore_eos
            only when set, so the settings (fingerprints) of runs made before it existed read the same.
    Sampling (vLLM's SamplingParams meanings): temperature (0: greedy, Algorithm 1 exactly), top_p, top_k
            (0: off), min_p, seed (None: unseeded). How each method samples: docs/python-api.md, "Sampling".
    stop:   strings that end an answer, cut as vLLM cuts them (the text stops before the first occurrence
            unless include_stop_str_in_output; finish_reason "stop"); a str is one stop string.
    min_tokens: no stop token or stop string ends an answer before this many tokens.
    to_dict() shows the sampling, stop and logprobs fields only when they differ from their defaults (fingerprints of
    earlier runs read the same).
    logprobs: None (none returned) or k >= 0, as vLLM's SamplingParams.logprobs: each emitted token's log-probability
            and its k most probable alternatives under the distribution it was chosen from (core/logprobs.py).
    prompt_logprobs: None or k >= 0, as vLLM's SamplingParams.prompt_logprobs: the verifier's log-probability of
            each token of its prompt (x_comp) after the tokens before it, with its rank and the k most probable
            tokens there (core/logprobs.py, prompt_logprobs); not for the drafter alone, which runs no verifier.
    structured_output: a grammar every answer follows (structured.py: {"json": schema}, {"json_object": True},
            {"regex": ...}, {"choice": [...]}, {"grammar": ...}); vLLM backend only. to_dict() shows it only when set.
    """

    K: int = 2
    beta: float = 1.0
    gamma: float = 0.5
    gate: str = "cda"
    lam: float = 0.1
    delta_source: str = "contrastive"
    bonus: str = "verifier"
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] | None = None  # None: the verifier's EOS tokens
    scd_alpha: float = 0.5  # Appendix B: alpha = 0.5, beta = 1.0
    ignore_eos: bool = False  # True: only stop_token_ids end an answer (benchmarks that run to the budget)
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings (a str is normalised to a 1-tuple)
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    structured_output: StructuredOutput | None = (
        None  # a dict of one kind is read as StructuredOutput
    )
    logprobs: int | None = (
        None  # per emitted token its logprob and this many top alternatives (None: none)
    )
    prompt_logprobs: int | None = (
        None  # per x_comp token the verifier's logprob and this many top alternatives
    )

    def __new__(cls, *args, **kwargs):
        """An unknown field is a ConfigError (not dataclass __init__'s TypeError), like a dict's."""
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(k for k in kwargs if k not in fields)
        if unknown or len(args) > len(fields):
            extra = unknown or [f"{len(args)} positional arguments"]
            raise ConfigError(
                f"unknown AsymSpecConfig field(s) {extra}: the fields are {', '.join(fields)}"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(
            self
        ):  # numpy scalars (np.int64(3), np.float32(0.7)) are numbers to a user
            object.__setattr__(self, f.name, _plain_number(getattr(self, f.name)))
        if _int(self.top_k) and self.top_k == -1:
            object.__setattr__(self, "top_k", 0)  # vLLM's (and many clients') "off"
        _check(
            isinstance(self.K, int)
            and not isinstance(self.K, bool)
            and 1 <= self.K <= 16,
            "K",
            self.K,
            "an integer in [1, 16]",
        )
        _check(
            _real(self.beta) and 0.0 <= self.beta <= 10.0,
            "beta",
            self.beta,
            "a number in [0, 10]",
        )
        _check(
            _real(self.gamma) and 0.0 < self.gamma <= 1.0,
            "gamma",
            self.gamma,
            "a number in (0, 1]",
        )
        _check(is_one_of(self.gate, GATES), "gate", self.gate, f"one of {GATES}")
        _check(
            _real(self.lam) and 0.0 <= self.lam <= 100.0,
            "lam",
            self.lam,
            "a number in [0, 100]",
        )
        _check(
            is_one_of(self.delta_source, DELTA_SOURCES),
            "delta_source",
            self.delta_source,
            f"one of {DELTA_SOURCES}",
        )
        _check(
            is_one_of(self.bonus, BONUS_RULES),
            "bonus",
            self.bonus,
            f"one of {BONUS_RULES}",
        )
        _check(
            isinstance(self.max_new_tokens, int)
            and not isinstance(self.max_new_tokens, bool)
            and 1 <= self.max_new_tokens <= 1_000_000,
            "max_new_tokens",
            self.max_new_tokens,
            "an integer in [1, 1000000]",
        )
        _check(
            _real(self.scd_alpha) and 0.0 < self.scd_alpha <= 1.0,
            "scd_alpha",
            self.scd_alpha,
            "a number in (0, 1]",
        )
        if self.stop_token_ids is not None:
            ids = self.stop_token_ids
            _check(
                isinstance(ids, (list, tuple, set, frozenset, range))
                and all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0
                    for i in ids
                ),
                "stop_token_ids",
                ids,
                "a list or tuple of non-negative token ids, or None",
            )
            _check(
                len(ids) > 0,
                "stop_token_ids",
                ids,
                "at least one token id, or None (the verifier's EOS "
                "tokens); to run every answer to max_new_tokens, set ignore_eos=True",
            )
            object.__setattr__(self, "stop_token_ids", tuple(ids))
        _check(
            isinstance(self.ignore_eos, bool),
            "ignore_eos",
            self.ignore_eos,
            "True or False",
        )
        self._check_sampling()
        object.__setattr__(
            self, "structured_output", structured_output_of(self.structured_output)
        )

    def _check_sampling(self) -> None:
        _check(
            _real(self.temperature) and 0.0 <= self.temperature <= 100.0,
            "temperature",
            self.temperature,
            "a number in [0, 100] (0: greedy)",
        )
        _check(
            _real(self.top_p) and 0.0 < self.top_p <= 1.0,
            "top_p",
            self.top_p,
            "a number in (0, 1]",
        )
        _check(
            _int(self.top_k) and self.top_k >= 0,
            "top_k",
            self.top_k,
            "a non-negative integer (0 or -1: off)",
        )
        _check(
            _real(self.min_p) and 0.0 <= self.min_p <= 1.0,
            "min_p",
            self.min_p,
            "a number in [0, 1]",
        )
        _check(
            self.seed is None or (_int(self.seed) and -(2**63) <= self.seed < 2**64),
            "seed",
            self.seed,
            "an integer in [-2**63, 2**64) or None",
        )
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        _check(
            isinstance(stop, (list, tuple))
            and all(isinstance(s, str) and s for s in stop),
            "stop",
            self.stop,
            "a non-empty string or a list of non-empty strings",
        )
        object.__setattr__(self, "stop", tuple(stop))
        _check(
            isinstance(self.include_stop_str_in_output, bool),
            "include_stop_str_in_output",
            self.include_stop_str_in_output,
            "True or False",
        )
        _check(
            self.logprobs is None or (_int(self.logprobs) and self.logprobs >= 0),
            "logprobs",
            self.logprobs,
            "None or a non-negative integer (the top alternatives returned per token)",
        )
        _check(
            self.prompt_logprobs is None
            or (_int(self.prompt_logprobs) and self.prompt_logprobs >= 0),
            "prompt_logprobs",
            self.prompt_logprobs,
            "None or a non-negative integer (the top alternatives returned per prompt token)",
        )
        _check(
            _int(self.min_tokens) and 0 <= self.min_tokens <= self.max_new_tokens,
            "min_tokens",
            self.min_tokens,
            f"an integer in [0, max_new_tokens={self.max_new_tokens}]",
        )

    @property
    def samples(self) -> bool:
        """Whether decoding samples rather than taking argmaxes: temperature >= 1e-5 (vLLM's _SAMPLING_EPS; below
        it vLLM decodes greedily, and x / tau would overflow)."""
        return self.temperature >= SAMPLING_EPS

    def replace(self, **changes) -> AsymSpecConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(
            self, **changes
        )  # an unknown field: ConfigError from __new__

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["stop"] = list(self.stop)
        for name in ("ignore_eos",) + SAMPLING_FIELDS:
            if out[name] == _DEFAULTS[name]:
                del out[name]
        del out["structured_output"]
        if self.structured_output is not None:
            out["structured_output"] = self.structured_output.to_dict()
        return out


SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "include_stop_str_in_output",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
)
_DEFAULTS = {
    f.name: (list(f.default) if isinstance(f.default, tuple) else f.default)
    for f in dataclasses.fields(AsymSpecConfig)
}


def as_config(config) -> AsymSpecConfig:
    """The config argument of the API: None (the defaults), an AsymSpecConfig, or a dict of its fields
    (read as AsymSpecConfig(**config)); anything else raises ConfigError."""
    if config is None:
        return AsymSpecConfig()
    if isinstance(config, AsymSpecConfig):
        return config
    if isinstance(config, dict):
        if not all(isinstance(k, str) for k in config):
            raise ConfigError(
                f"config keys must be AsymSpecConfig field names, got {sorted(map(repr, config))}"
            )
        return AsymSpecConfig().replace(**config)
    raise ConfigError(
        f"config must be an AsymSpecConfig, a dict of its fields or None, got {type(config).__name__}"
    )


SAMPLING_EPS = 1e-5  # vllm/sampling_params.py _SAMPLING_EPS: a temperature below it is greedy decoding


def with_overrides(config, overrides: dict) -> AsymSpecConfig:
    """as_config(config) with keyword overrides of its fields (generate(..., max_new_tokens=64, K=4))."""
    cfg = as_config(config)
    return cfg.replace(**overrides) if overrides else cfg


def is_one_of(x, allowed: tuple[str, ...]) -> bool:
    return isinstance(x, str) and x in allowed


def _plain_number(x):
    """A numeric scalar of another type (numpy's, a 0-d array's item) as Python's int or float; anything else as
    it is (bools stay bools: they are not numbers here)."""
    if isinstance(x, (bool, int, float)) or type(x).__name__ == "bool_":
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return x


def _real(x) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return isinstance(x, int) or math.isfinite(
        x
    )  # isfinite() cannot take ints beyond the float range


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check(ok: bool, name: str, value, allowed: str) -> None:
    if not ok:
        raise ConfigError(
            f"AsymSpecConfig.{name}={value!r} is invalid: expected {allowed}"
        )
