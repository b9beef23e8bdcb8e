"""A constraint checked by the compiler the engine will use, before it reaches the engine; that compiler pinned.

vLLM 0.19's "auto" structured-output backend tries xgrammar in the front end and, where xgrammar refuses a
constraint, falls back to guidance or outlines (SamplingParams._validate_structured_outputs); a constraint that
backend then fails to compile in the engine core's scheduler (a JSON schema whose `$ref`s only point at each
other, among others) ends the engine core: EngineDeadError for that request and every later one. So:
  - every engine this toolkit builds runs xgrammar (`pinned`), where "auto" would resolve every constraint
    xgrammar accepts anyway; a user's explicit other backend is kept;
  - a constraint is compiled to a grammar by xgrammar's own converter (vLLM's `validate_xgrammar_grammar`, the
    front-end check of that backend) before a request carrying it is built: a constraint it refuses is that
    request's ConfigError (the server's 400 naming the field), never the engine's death;
  - a JSON schema whose keywords xgrammar would compile but not enforce is refused the same way, naming each
    keyword (schema_keywords.py): every answer that stops matches the schema it was sent.
"""

from __future__ import annotations

import dataclasses

from ...core.errors import ConfigError
from ...core.structured import FIELD, StructuredOutput
from .schema_keywords import check_enforced

BACKEND = "xgrammar"


def pinned(config):
    """engine kwargs' structured_outputs_config (None, a dict or vLLM's StructuredOutputsConfig) with backend
    "auto" (or unset) made BACKEND; an explicit other backend kept."""
    if config is None:
        return {"backend": BACKEND}
    if isinstance(config, dict):
        return (
            {**config, "backend": BACKEND}
            if config.get("backend", "auto") == "auto"
            else config
        )
    return (
        dataclasses.replace(config, backend=BACKEND)
        if config.backend == "auto"
        else config
    )


def check_compiles(constraint: StructuredOutput, field: str = FIELD) -> None:
    """ConfigError naming `field` and xgrammar's message when xgrammar cannot turn the constraint into a
    grammar; UnenforcedSchemaError (a ConfigError) when a JSON schema holds keywords it would not enforce."""
    # compiled is not enough: every keyword of a JSON schema must be enforced
    if constraint.kind == "json":
        check_enforced(constraint.value, field)
    from vllm import SamplingParams  # lazy: loads vLLM
    from vllm.v1.structured_output.backend_xgrammar import (
        validate_xgrammar_grammar,
    )  # lazy: loads vLLM

    params = SamplingParams(structured_outputs=constraint.sampling_params())
    try:
        validate_xgrammar_grammar(params)
    except ValueError as e:
        cause = " ".join(str(e.__cause__ or e).split())
        raise ConfigError(
            f"{field}: the {constraint.kind} constraint cannot be compiled ({BACKEND}, the engine's "
            f"structured-output backend): {cause}"
        ) from e
