"""JSON schema keywords xgrammar would not enforce (asymspec_vl/backends/vllm/schema_keywords.py): each refused with
its JSON pointer, each enforced one passed; every refusal checked against xgrammar itself (a string that breaks the
keyword is accepted by its grammar: the refusal list stays true if xgrammar changes); the library's check_compiles
and the server's request path give the typed error, before vLLM is loaded."""

import json
from types import SimpleNamespace

import pytest

from asymspec_vl.backends.vllm.grammar import check_compiles
from asymspec_vl.backends.vllm.schema_keywords import NEVER, unenforced
from asymspec_vl.core.errors import ConfigError, UnenforcedSchemaError
from asymspec_vl.core.structured import structured_output_of
from asymspec_vl.serve import http_errors
from asymspec_vl.serve.settings import ServeSettings
from asymspec_vl.serve.structured_output import structured_output_of_request

OBJ = {"type": "object", "additionalProperties": True}
DEFS = {
    "A": {
        "type": "object",
        "properties": {"k": {"const": "a"}, "x": {"type": "integer"}},
        "required": ["k"],
    },
    "B": {
        "type": "object",
        "properties": {"k": {"const": "b"}, "y": {"type": "string"}},
        "required": ["k"],
    },
}

# (schema, JSON text that breaks the keyword, JSON text that keeps it): xgrammar's grammar rejects the first
ENFORCED = [
    ({"type": "integer", "minimum": 5}, "3", "7"),
    ({"type": "integer", "maximum": 5}, "7", "3"),
    ({"type": "integer", "exclusiveMinimum": 5}, "5", "6"),
    ({"type": "number", "exclusiveMaximum": 1.5}, "1.5", "1.4"),
    ({"type": ["integer", "null"], "minimum": 5}, "3", "7"),
    ({"type": "string", "pattern": "^a+$"}, '"b"', '"aa"'),
    ({"type": "string", "format": "date"}, '"x"', '"2020-01-02"'),
    ({"type": "string", "minLength": 3}, '"a"', '"abc"'),
    ({"type": "string", "maxLength": 2}, '"abc"', '"ab"'),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, "[1]", "[1,2]"),
    ({"items": {"type": "integer"}, "maxItems": 1}, "[1,2]", "[1]"),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": False},
        '["a"]',
        "[1]",
    ),
    ({"enum": [1, "a"]}, "2", '"a"'),
    ({"type": "string", "enum": ["a", "b"], "title": "t"}, '"c"', '"a"'),
    ({"const": "x"}, '"y"', '"x"'),
    ({**OBJ, "minProperties": 1}, "{}", '{"a":1}'),
    ({**OBJ, "maxProperties": 1}, '{"a":1,"b":2}', '{"a":1}'),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        "{}",
        '{"a":1}',
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": False,
        },
        '{"a":1,"b":2}',
        '{"a":1}',
    ),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}},
        '{"a":"s"}',
        '{"a":1}',
    ),
    ({"anyOf": [{"type": "integer", "minimum": 5}, {"type": "null"}]}, "3", "7"),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "true", "1"),
    (
        {"$defs": DEFS, "oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
        '{"k":"c"}',
        '{"k":"a","x":1}',
    ),
    ({"allOf": [{"type": "integer", "minimum": 5}]}, "3", "7"),
    (
        {
            "$defs": {"i": {"type": "integer", "maximum": 5}},
            "$ref": "#/$defs/i",
            "description": "d",
        },
        "7",
        "3",
    ),
    (
        {
            "$defs": {
                "n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}
            },
            "$ref": "#/$defs/n",
        },
        '{"c":5}',
        '{"c":{"c":{}}}',
    ),
]

# (schema, JSON text that breaks the keyword but xgrammar's grammar accepts, the pointer refused)
IGNORED = [
    ({"minimum": 5}, "3", "#/minimum"),
    ({"maximum": 5}, "7", "#/maximum"),
    ({"pattern": "^a+$"}, '"b"', "#/pattern"),
    ({"format": "date"}, '"x"', "#/format"),
    ({"minLength": 3}, '"a"', "#/minLength"),
    ({"minItems": 2}, "[1]", "#/minItems"),
    (
        {"type": "object", "properties": {"a": {"maxLength": 1}}},
        '{"a":"abc"}',
        "#/properties/a/maxLength",
    ),
    ({"type": "number", "multipleOf": 0.5}, "0.3", "#/multipleOf"),
    ({"type": "string", "format": "regex"}, '"("', "#/format"),
    ({"type": "string", "pattern": "^a+$", "minLength": 3}, '"a"', "#/minLength"),
    (
        {"type": "string", "format": "date", "maxLength": 3},
        '"2020-01-02"',
        "#/maxLength",
    ),
    ({"type": "string", "pattern": "^(?!a).*$"}, '"a"', "#/pattern"),
    (
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "[1,1]",
        "#/uniqueItems",
    ),
    (
        {"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}},
        "[1]",
        "#/contains",
    ),
    ({"not": {"type": "string"}}, '"a"', "#/not"),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "if": {"properties": {"a": {"const": 1}}},
            "then": {"required": ["b"]},
        },
        '{"a":1}',
        "#/if",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependentRequired": {"a": ["b"]},
        },
        '{"a":1}',
        "#/dependentRequired",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependencies": {"a": ["b"]},
        },
        '{"a":1}',
        "#/dependencies",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "dependentSchemas": {"a": {"required": ["b"]}},
        },
        '{"a":1}',
        "#/dependentSchemas",
    ),
    (
        {
            **OBJ,
            "properties": {"a": {"type": "integer"}},
            "patternProperties": {"^x": {"type": "integer"}},
        },
        '{"xa":"s"}',
        "#/patternProperties",
    ),
    ({**OBJ, "required": ["a"]}, "{}", "#/required/0"),
    (
        {
            "$dynamicAnchor": "n",
            "type": "object",
            "properties": {"c": {"$dynamicRef": "#n"}},
        },
        '{"c":1}',
        "#/properties/c/$dynamicRef",
    ),
    (
        {"$defs": {"i": {"type": "integer"}}, "$ref": "#/$defs/i", "minimum": 5},
        "3",
        "#/minimum",
    ),
    (
        {
            "type": "integer",
            "minimum": 5,
            "anyOf": [{"type": "integer"}, {"type": "null"}],
        },
        "3",
        "#/minimum",
    ),
    (
        {"type": "integer", "anyOf": [{"type": "string"}, {"type": "integer"}]},
        '"s"',
        "#/type",
    ),
    (
        {
            "type": "integer",
            "minimum": 5,
            "allOf": [{"type": "integer", "maximum": 10}],
        },
        "3",
        "#/minimum",
    ),
    ({"type": "string", "enum": ["a", "abc"], "minLength": 3}, '"a"', "#/minLength"),
    ({"type": "string", "enum": ["a", 1]}, "1", "#/type"),
    ({"const": 3, "minimum": 5}, "3", "#/minimum"),
    ({"allOf": [{"type": "integer"}, {"minimum": 5}]}, "3", "#/allOf"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1", "#/oneOf"),
    (
        {
            "oneOf": [
                {"type": "object", "properties": {"x": {"type": "integer"}}},
                {"type": "object", "properties": {"y": {"type": "integer"}}},
            ]
        },
        "{}",
        "#/oneOf",
    ),
]


def accepts(schema: dict, text: str) -> bool:
    """Whether xgrammar's grammar of `schema` accepts `text` whole."""
    import xgrammar  # lazy: loads torch
    from xgrammar.testing import _is_grammar_accept_string  # lazy: loads torch

    return _is_grammar_accept_string(
        xgrammar.Grammar.from_json_schema(json.dumps(schema)), text
    )


def is_valid(schema: dict, text: str) -> bool:
    import jsonschema  # lazy: only these tests

    draft = (
        jsonschema.Draft7Validator
        if "dependencies" in schema
        else jsonschema.Draft202012Validator
    )
    return draft(schema, format_checker=draft.FORMAT_CHECKER).is_valid(json.loads(text))


@pytest.mark.parametrize("schema,bad,good", ENFORCED, ids=lambda v: json.dumps(v)[:60])
def test_enforced_keywords_pass_and_xgrammar_enforces_them(schema, bad, good):
    assert unenforced(schema) == []
    assert not is_valid(schema, bad) and is_valid(
        schema, good
    )  # the texts are what they claim
    assert not accepts(schema, bad) and accepts(schema, good)


@pytest.mark.parametrize(
    "schema,bad,pointer", IGNORED, ids=lambda v: json.dumps(v)[:60]
)
def test_ignored_keywords_are_refused_with_their_pointer_and_xgrammar_ignores_them(
    schema, bad, pointer
):
    assert pointer in [p for p, _ in unenforced(schema)]
    assert not is_valid(schema, bad)  # the text breaks the schema ...
    assert accepts(
        schema, bad
    )  # ... and xgrammar's grammar lets it through: the refusal is still needed


def test_every_never_keyword_is_refused_where_it_stands_and_nested():
    for keyword in NEVER:
        nested = {
            "type": "object",
            "properties": {"a/b": {"type": "array", "items": {keyword: {}}}},
        }
        assert ("#/properties/a~1b/items/" + keyword) in [
            p for p, _ in unenforced(nested)
        ], keyword


def test_pydantic_shapes_pass():
    optional_int = {
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
        "default": None,
        "title": "N",
    }
    schema = {
        "type": "object",
        "title": "Answer",
        "properties": {
            "n": optional_int,
            "kind": {"$ref": "#/$defs/K"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["n", "kind"],
        "$defs": {"K": {"enum": ["a", "b"], "title": "K", "type": "string"}},
    }
    assert unenforced(schema) == []


def test_check_compiles_refuses_before_vllm_with_every_keyword_named():
    constraint = structured_output_of(
        {
            "json": {
                "type": "object",
                "properties": {"a": {"minimum": 1}},
                "required": ["a"],
                "not": {},
            }
        }
    )
    with pytest.raises(UnenforcedSchemaError) as caught:
        check_compiles(constraint, "AsymSpecConfig.structured_output")
    error = caught.value
    assert isinstance(error, ConfigError)
    assert [p for p, _ in error.keywords] == ["#/not", "#/properties/a/minimum"]
    assert "AsymSpecConfig.structured_output" in str(
        error
    ) and "#/properties/a/minimum" in str(error)


def request_with(schema: dict):
    """A ChatCompletionRequest's constrained-output fields, response_format json_schema carrying `schema`."""
    return SimpleNamespace(
        response_format=SimpleNamespace(
            type="json_schema", json_schema=SimpleNamespace(json_schema=schema)
        ),
        structured_outputs=None,
    )


def test_the_server_answers_a_400_naming_the_field_and_the_keyword():
    settings = ServeSettings(drafter="d", verifier="v", backend="vllm")
    with pytest.raises(http_errors.UnenforcedSchemaError) as caught:
        structured_output_of_request(
            request_with({"type": "string", "pattern": "^a", "minLength": 2}), settings
        )
    error = caught.value
    assert http_errors.status_of(error) == 400
    assert error.param == "response_format" and error.keywords[0][0] == "#/minLength"
    assert "response_format" in str(error) and "#/minLength" in str(error)


def test_pydantic_models_pass_and_their_set_and_constrained_pattern_are_refused():
    from typing import Literal  # lazy: only this test

    from pydantic import BaseModel, Field  # lazy: only this test

    class Cat(BaseModel):
        kind: Literal["cat"]
        lives: int

    class Dog(BaseModel):
        kind: Literal["dog"]
        bark: str

    class Answer(BaseModel):
        n: int | None = Field(default=None, ge=0)
        name: str = Field(max_length=10)
        tags: list[str] = Field(max_length=3)
        pet: Cat | Dog = Field(discriminator="kind")
        word: str = Field(pattern=r"^[a-z]+$")
        score: float = Field(gt=0.5)
        counts: dict[str, int]

    class Refused(BaseModel):
        ids: set[int]
        code: str = Field(pattern="^a", min_length=2)

    assert unenforced(Answer.model_json_schema()) == []
    assert [p for p, _ in unenforced(Refused.model_json_schema())] == [
        "#/properties/ids/uniqueItems",
        "#/properties/code/minLength",
    ]
