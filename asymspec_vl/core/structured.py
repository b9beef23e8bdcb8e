"""StructuredOutput: the grammar an answer must follow (vLLM's structured outputs), for AsymSpecConfig.

One constraint, named as vLLM's StructuredOutputsParams names it:
  json         a JSON schema (a dict, or its JSON text)
  json_object  any JSON object (the value must be True)
  regex        a regular expression the whole answer matches
  choice       one of a list of strings
  grammar      a grammar in the syntax of the engine's structured-output backend (xgrammar: EBNF)
On the vLLM backend the grammar masks the verifier's logits t at every verified position before any method's
rule reads them (docs/gpu-and-vllm.md, "Structured output"); across a vocabulary map every rule then chooses over
the shared set ∩ the allowed tokens, and a position that allows none of them ends that request alone
(vllm_patches/grammar_dead_end.py; docs/cross-family.md). The transformers backend refuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .errors import ConfigError

KINDS = ("json", "json_object", "regex", "choice", "grammar")
FIELD = "AsymSpecConfig.structured_output"


@dataclass(frozen=True)
class StructuredOutput:
    """kind: one of KINDS; spec: its value as text (JSON text for json / choice, "true" for json_object), so
    that the config stays hashable and compares by content."""

    kind: str
    spec: str

    @property
    def value(self):
        """The constraint's value as vLLM takes it (a schema dict, True, a list of choices, a string)."""
        return (
            json.loads(self.spec)
            if self.kind in ("json", "json_object", "choice")
            else self.spec
        )

    def to_dict(self) -> dict:
        return {self.kind: self.value}

    def sampling_params(self):
        """vLLM's StructuredOutputsParams of this constraint."""
        from vllm.sampling_params import StructuredOutputsParams  # lazy: loads vLLM

        return StructuredOutputsParams(**self.to_dict())


def structured_output_of(value) -> StructuredOutput | None:
    """None, a StructuredOutput, or a dict of exactly one kind ({"json": schema}, {"json_object": True},
    {"regex": "..."}, {"choice": [...]}, {"grammar": "..."}) -> a StructuredOutput (None for None);
    ConfigError naming the field otherwise."""
    if value is None or isinstance(value, StructuredOutput):
        return value
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in KINDS:
        raise ConfigError(
            f"{FIELD}={value!r} is invalid: expected a dict of exactly one of {KINDS}, e.g. "
            '{"json": {"type": "object", ...}}'
        )
    kind, spec = next(iter(value.items()))
    if kind == "json":
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError as e:
                raise ConfigError(f"{FIELD} json is not JSON text: {e}") from e
        if not isinstance(spec, dict):
            raise ConfigError(
                f"{FIELD} json must be a JSON schema (an object), got {type(spec).__name__}"
            )
        return StructuredOutput(kind, json.dumps(spec, sort_keys=True))
    if kind == "json_object":
        if spec is not True:
            raise ConfigError(f"{FIELD} json_object must be True, got {spec!r}")
        return StructuredOutput(kind, "true")
    if kind == "choice":
        if not (
            isinstance(spec, (list, tuple))
            and spec
            and all(isinstance(c, str) for c in spec)
        ):
            raise ConfigError(
                f"{FIELD} choice must be a non-empty list of strings, got {spec!r}"
            )
        return StructuredOutput(kind, json.dumps(list(spec)))
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{FIELD} {kind} must be a non-empty string, got {spec!r}")
    return StructuredOutput(kind, spec)


def refuse_on_backend(cfg, backend: str) -> None:
    """ConfigError when a structured output is asked of a backend that does not build it (transformers)."""
    if cfg.structured_output is not None and backend != "vllm":
        raise ConfigError(
            f"{FIELD} ({cfg.structured_output.kind}) is served by the vLLM backend only: the "
            f"{backend!r} backend cannot constrain its answers to a grammar; load with "
            'backend="vllm", or leave structured_output unset'
        )
