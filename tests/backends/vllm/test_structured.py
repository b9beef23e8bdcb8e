"""Structured output through the vLLM backend, every method, on the toy pair (CPU engines): every answer parses with
json.loads and validates against its schema, and a regular expression holds over the whole answer (the prime
token, x_comp's last prompt token "\\n", never advances the grammar)."""

import json
import re

import jsonschema
import pytest
from asymspec_vl.evals.toy.eval import request_of

from asymspec_vl.toy import world

pytestmark = pytest.mark.vllm

N = 4
METHODS = ("asymspec", "sd", "scd", "floor", "drafter")
SCHEMAS = {
    "object_with_an_integer": {
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["count"],
        "additionalProperties": False,
    },
    "enum_string": {"type": "string", "enum": ["red", "green", "blue"]},
}
PRIME_REGEX = "\nyes|no"  # "\n" is the prime token: a grammar advanced by it would leave only "yes"


@pytest.fixture(scope="module")
def vl():
    from asymspec_vl import AsymSpecVL

    # without disable_any_whitespace the toy models fill a JSON answer with whitespace up to max_new_tokens
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded",
        verifier="embedded",
        backend="vllm",
        dtype="float32",
        structured_outputs_config={
            "backend": "xgrammar",
            "disable_any_whitespace": True,
        },
    )
    yield vl
    vl.backend.close()


@pytest.mark.parametrize("method", METHODS)
def test_every_answer_parses_and_matches_its_schema(vl, method):
    reqs = [request_of(e) for e in world.heldout(N)]
    for name, schema in SCHEMAS.items():
        results = vl.generate_batch(
            reqs, method, {"max_new_tokens": 24, "structured_output": {"json": schema}}
        )
        for r in results:
            assert r.finish_reason == "stop", (name, r.text, r.error)
            jsonschema.validate(json.loads(r.text), schema)


@pytest.mark.parametrize("method", ("asymspec", "sd", "scd"))
def test_the_prime_token_does_not_advance_the_grammar(vl, method):
    """On the speculative engine the prompt's last token comes out as a hidden first output: before the fix the
    grammar accepted it ("\\n"), so the answer was "yes" alone, which the regular expression does not match."""
    reqs = [request_of(e) for e in world.heldout(N)]
    results = vl.generate_batch(
        reqs, method, {"max_new_tokens": 8, "structured_output": {"regex": PRIME_REGEX}}
    )
    for r in results:
        assert r.finish_reason == "stop" and re.fullmatch(PRIME_REGEX, r.text), (
            r.text,
            r.error,
        )


def test_a_position_the_grammar_leaves_no_committable_token_ends_the_request_with_its_answer_so_far(
    vl,
):
    """min_tokens holds the end of turn, the only token the grammar allows after "yes" / "no": a dead end
    (vllm_patches/grammar_dead_end.py). The request ends there with a GrammarDeadEndError naming the position, its
    answer kept, never a token the grammar forbids; the engine serves the next request."""
    reqs = [request_of(e) for e in world.heldout(2)]
    cfg = {"K": 2, "max_new_tokens": 8, "structured_output": {"choice": ["yes", "no"]}}
    for r in vl.generate_batch(reqs, "asymspec", {**cfg, "min_tokens": 4}):
        assert r.finish_reason == "error" and r.text in ("yes", "no"), (r.text, r.error)
        assert (
            "GrammarDeadEndError" in r.error
            and "no token the request may commit" in r.error
        )
        assert f"at output position {len(r.token_ids)} " in r.error
    assert all(r.finish_reason == "stop" for r in vl.generate_batch(reqs, "sd", cfg))


def test_a_constraint_the_engine_cannot_compile_is_a_config_error_and_the_engine_lives():
    """With vLLM's default ("auto") structured-output backend: the engine runs xgrammar (grammar.py), and a
    constraint xgrammar refuses (a `$ref` cycle, which "auto" would hand to another backend whose compile error
    in the scheduler ends the engine core) is a ConfigError before the request is built; the engine answers
    the next request."""
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.core.errors import ConfigError

    cycle = {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a",
    }
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", backend="vllm", dtype="float32"
    )
    try:
        reqs = [request_of(e) for e in world.heldout(1)]
        for bad in ({"json": cycle}, {"regex": "(abc"}, {"grammar": "root ::= ("}):
            with pytest.raises(
                ConfigError, match="structured_output.*cannot be compiled"
            ):
                vl.generate_batch(
                    reqs, "floor", {"max_new_tokens": 4, "structured_output": bad}
                )
        good = vl.generate_batch(
            reqs,
            "asymspec",
            {"max_new_tokens": 4, "structured_output": {"regex": "[0-9]+"}},
        )[0]
        assert not good.error and re.fullmatch("[0-9]+", good.text)
        llm = vl.backend.engine(vl.backend.engine_for("floor", 2)[0])
        assert (
            llm.llm_engine.vllm_config.structured_outputs_config.backend == "xgrammar"
        )
    finally:
        vl.backend.close()
