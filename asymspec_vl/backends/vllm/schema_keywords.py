"""The keywords of a JSON schema xgrammar would compile but not enforce, found before the schema reaches the engine.

xgrammar 0.2 (the engine's structured-output backend, grammar.py) turns a schema into a grammar; some keywords it
drops without an error (tests/backends/vllm/test_schema_keywords.py shows each one dropped), so an answer that stops
could break them. `check_enforced` refuses such a schema (UnenforcedSchemaError, naming each keyword and its JSON
pointer) rather than let "every answer that stops matches the schema" be false. What is refused (docs/serve.md,
"Schema keywords"):
  - keywords never enforced: NEVER below (some of them vLLM's xgrammar front end refuses too, without a name);
  - an assertion beside `$ref`, `anyOf`, `oneOf`, `allOf`, `enum` or `const`: that keyword alone is compiled
    (`type` beside `enum` / `const` is kept when every value has that type);
  - a number / string / array keyword in a schema whose `type` does not name its type (`{"minimum": 5}`);
  - `format` other than xgrammar's formats; `minLength` / `maxLength` beside `pattern` or `format`; a `pattern`
    with a lookaround; a `required` name not in `properties`; `allOf` of more than one schema; `oneOf` whose
    schemas are not disjoint by type or by a required `const` / `enum` property (xgrammar reads it as `anyOf`).
"""

from __future__ import annotations

import json

from ...core.errors import UnenforcedSchemaError

NEVER = {
    "not": "not compiled",
    "if": "not compiled (with then / else)",
    "then": "not compiled",
    "else": "not compiled",
    "dependentRequired": "not compiled",
    "dependentSchemas": "not compiled",
    "dependencies": "not compiled",
    "contains": "not compiled",
    "minContains": "not compiled",
    "maxContains": "not compiled",
    "uniqueItems": "not compiled",
    "patternProperties": "not compiled",
    "additionalItems": "not compiled (draft 7 tuples: use prefixItems and items)",
    "multipleOf": "not compiled for numbers, refused by vLLM's front end for integers",
    "$dynamicRef": "not compiled",
    "$recursiveRef": "not compiled",
}
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
STRING_KEYWORDS = ("pattern", "format", "minLength", "maxLength")
ARRAY_KEYWORDS = ("minItems", "maxItems")
CONTROLLERS = (
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "enum",
    "const",
)  # each compiled alone, its siblings dropped
ASSERTIONS = (
    ("type", "properties", "required", "additionalProperties", "unevaluatedProperties")
    + ("minProperties", "maxProperties", "items", "prefixItems", "unevaluatedItems")
    + NUMBER_KEYWORDS
    + STRING_KEYWORDS
    + ARRAY_KEYWORDS
)
FORMATS = frozenset(
    ("email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname")
    + ("uuid", "uri", "uri-reference", "uri-template", "json-pointer")
    + ("relative-json-pointer",)
)  # vLLM's STRING_SUPPORTED_FORMATS: the formats xgrammar compiles
LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
SUBSCHEMA = (
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
)
SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def check_enforced(schema, field: str) -> None:
    """UnenforcedSchemaError naming `field` and every keyword of `schema` xgrammar would not enforce."""
    found = unenforced(schema)
    if found:
        listed = "; ".join(f"{pointer} ({why})" for pointer, why in found)
        raise UnenforcedSchemaError(
            f"{field}: the JSON schema uses keywords the engine's grammar (xgrammar) would not enforce, so an "
            f"answer could break them: {listed}. Leave them out or write them as the grammar enforces them "
            '(docs/serve.md, "Schema keywords")',
            found,
        )


def unenforced(schema) -> list[tuple[str, str]]:
    """[(JSON pointer of the keyword, why it is not enforced)] over the whole schema, in document order."""
    found: list[tuple[str, str]] = []
    _walk(schema, "#", schema, found)
    return found


def _walk(s, pointer: str, root, found: list) -> None:
    if not isinstance(s, dict):
        return
    found.extend((f"{pointer}/{k}", why) for k, why in _in_place(s, root))
    for k in SUBSCHEMA:
        _walk(s.get(k), f"{pointer}/{k}", root, found)
    for k in SUBSCHEMA_LISTS:
        if isinstance(s.get(k), list):
            for i, sub in enumerate(s[k]):
                _walk(sub, f"{pointer}/{k}/{i}", root, found)
    for k in SUBSCHEMA_MAPS:
        if isinstance(s.get(k), dict):
            for name, sub in s[k].items():
                _walk(sub, f"{pointer}/{k}/{_escape(name)}", root, found)


def _in_place(s: dict, root) -> list[tuple[str, str]]:
    """(keyword, why) for the keywords of one schema object that are not enforced (its subschemas aside)."""
    found = [(k, NEVER[k]) for k in s if k in NEVER]
    controllers = [k for k in CONTROLLERS if k in s]
    if controllers:
        head = controllers[0]
        for k in s:
            if k != head and (k in CONTROLLERS or k in ASSERTIONS):
                if k == "type" and head in ("enum", "const") and _values_typed(s):
                    continue
                found.append((k, f"dropped beside {head}, which is compiled alone"))
        if head == "allOf" and isinstance(s["allOf"], list) and len(s["allOf"]) > 1:
            found.append(("allOf", "only one schema of an allOf is compiled"))
        if head == "oneOf" and not _disjoint(s["oneOf"], root):
            found.append(("oneOf", "compiled as anyOf: its schemas are not disjoint"))
        return found
    types = _types(s)
    for keywords, wanted in (
        (NUMBER_KEYWORDS, {"integer", "number"}),
        (STRING_KEYWORDS, {"string"}),
        (ARRAY_KEYWORDS, {"array"}),
    ):
        typed = bool(types & wanted) or (
            wanted == {"array"} and ("items" in s or "prefixItems" in s)
        )
        for k in keywords:
            if k in s and not typed:
                found.append(
                    (k, f'dropped without a "type" of {"/".join(sorted(wanted))}')
                )
    if types & {"string"}:
        found.extend(_string_rules(s))
    required, properties = s.get("required"), s.get("properties") or {}
    if isinstance(required, list):
        found.extend(
            (f"required/{i}", f"{name!r} is not in properties: not compiled")
            for i, name in enumerate(required)
            if name not in properties
        )
    return found


def _string_rules(s: dict) -> list[tuple[str, str]]:
    found = []
    if "format" in s and s["format"] not in FORMATS:
        found.append(("format", f"format {s['format']!r} is not compiled"))
    for k in ("minLength", "maxLength"):
        if k in s and ("pattern" in s or "format" in s):
            found.append((k, "dropped beside pattern or format"))
    pattern = s.get("pattern")
    if isinstance(pattern, str) and any(a in pattern for a in LOOKAROUNDS):
        found.append(("pattern", "its lookaround is dropped"))
    return found


def _types(s: dict) -> set[str]:
    t = s.get("type")
    return (
        {t}
        if isinstance(t, str)
        else {x for x in t if isinstance(x, str)}
        if isinstance(t, list)
        else set()
    )


def _json_types(value) -> set[str]:
    """The JSON Schema types a JSON value has (3 and 3.0 are both integer and number)."""
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, (int, float)):
        return {"number", "integer"} if float(value).is_integer() else {"number"}
    if value is None:
        return {"null"}
    for kind, name in ((str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return {name}
    return set()


def _values_typed(s: dict) -> bool:
    """Every enum / const value has one of the schema's types (then the dropped `type` changes nothing)."""
    values = s["enum"] if "enum" in s else [s["const"]]
    return isinstance(values, list) and all(_json_types(v) & _types(s) for v in values)


def _resolve(s, root):
    """A local `#/...` $ref followed (once per hop, at most 32 hops); anything else as it is."""
    for _ in range(32):
        ref = s.get("$ref") if isinstance(s, dict) else None
        if not (isinstance(ref, str) and ref.startswith("#")):
            return s
        s = root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            s = s.get(part) if isinstance(s, dict) else None
    return s


def _disjoint(branches, root) -> bool:
    """No JSON value can match two of the schemas: shown by their types, or by a property all of them require
    whose const / enum values differ."""
    if not isinstance(branches, list):
        return True
    schemas = [_resolve(b, root) for b in branches]
    if not all(isinstance(b, dict) for b in schemas):
        return False
    return all(
        _pair_disjoint(a, b) for i, a in enumerate(schemas) for b in schemas[i + 1 :]
    )


def _pair_disjoint(a: dict, b: dict) -> bool:
    ta, tb = _widened(_branch_types(a)), _widened(_branch_types(b))
    if ta and tb and not ta & tb:
        return True
    for name in set(a.get("required") or ()) & set(b.get("required") or ()):
        va, vb = _allowed(a, name), _allowed(b, name)
        if va is not None and vb is not None and not va & vb:
            return True
    return False


def _branch_types(s: dict) -> set[str]:
    if "enum" in s or "const" in s:
        values = s["enum"] if "enum" in s else [s["const"]]
        return (
            set().union(*(_json_types(v) for v in values))
            if isinstance(values, list)
            else set()
        )
    return _types(s)


def _widened(types: set[str]) -> set[str]:
    """integer is a number: a type set that holds one holds both, for the overlap test."""
    return types | {"integer"} if "number" in types else types


def _allowed(s: dict, name: str) -> set[str] | None:
    """The values property `name` may take, as JSON texts (None: not fixed by const / enum)."""
    prop = (s.get("properties") or {}).get(name)
    if not isinstance(prop, dict):
        return None
    values = (
        prop["enum"] if "enum" in prop else [prop["const"]] if "const" in prop else None
    )
    return (
        {json.dumps(v, sort_keys=True) for v in values}
        if isinstance(values, list)
        else None
    )


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")
