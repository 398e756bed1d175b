"""Cross-field rules stated in the published schema, beside the validators that enforce them.

A model validator such as "give exactly one of global_batch_sequences or global_batch_tokens" is
invisible to a client generator or a fuzzer unless the JSON Schema says it too: schemathesis found
requests valid by the schema that the service refused (issue 17). :func:`states` adds the rule to the
model's JSON Schema as ``allOf`` terms, so the contract and the validator say the same thing; the
contract test (tests/api/test_fuzz_openapi.py, schemathesis' positive-data check) fails where they
part. A field counts as *given* when it is present and not null, as the validators read it
(``getattr(self, name) is not None``).

Rules OpenAPI cannot say (a batch in tokens that is a multiple of ``seq_len_tokens``, a reference
to a preset that must exist) are stated in the field's description instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

JsonSchemaRule = dict[str, Any]
ModelT = TypeVar("ModelT", bound=type[BaseModel])


def given(name: str) -> JsonSchemaRule:
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def absent(name: str) -> JsonSchemaRule:
    return {"not": given(name)}


def equals(name: str, value: Any) -> JsonSchemaRule:
    """``name`` given and equal to ``value``."""
    return {"required": [name], "properties": {name: {"const": value}}}


def implies(condition: JsonSchemaRule, consequence: JsonSchemaRule) -> JsonSchemaRule:
    return {"if": condition, "then": consequence}


def together(*names: str) -> JsonSchemaRule:
    """All of ``names`` given, or none of them."""
    return implies({"anyOf": [given(name) for name in names]}, {"allOf": [given(name) for name in names]})


def inside(name: str, rule: JsonSchemaRule) -> JsonSchemaRule:
    """``rule`` applied to the object at property ``name`` (vacuous when it is absent or null)."""
    return {"properties": {name: rule}}


def exactly_one(*names: str) -> JsonSchemaRule:
    """One of ``names`` given, the others absent or null."""
    return {"oneOf": [{"allOf": [given(name), *(absent(other) for other in names if other != name)]}
                      for name in names]}  # fmt: skip


def not_both(first: str, *others: str) -> JsonSchemaRule:
    """``first`` and any of ``others`` not given together."""
    return {"not": {"allOf": [given(first), {"anyOf": [given(other) for other in others]}]}}


def only_with(dependent: str, *required: str) -> JsonSchemaRule:
    """``dependent`` given only when every one of ``required`` is given."""
    return {"if": given(dependent), "then": {"allOf": [given(name) for name in required]}}


def either(*names: str) -> JsonSchemaRule:
    """At least one of ``names`` given."""
    return {"anyOf": [given(name) for name in names]}


def states(*rules: JsonSchemaRule) -> Callable[[ModelT], ModelT]:
    """Class decorator: the model's JSON Schema carries ``rules`` besides those of its bases (drawn by
    :func:`add_to_json_schema`, which ApiModel's JSON Schema hook calls)."""

    def decorate(model: ModelT) -> ModelT:
        inherited: tuple[JsonSchemaRule, ...] = getattr(model, "__cross_field_rules__", ())
        model.__cross_field_rules__ = (*inherited, *rules)  # type: ignore[attr-defined]
        return model

    return decorate


def add_to_json_schema(model: type[Any], json_schema: dict[str, Any]) -> None:
    rules: tuple[JsonSchemaRule, ...] = getattr(model, "__cross_field_rules__", ())
    if rules:
        json_schema["allOf"] = [*json_schema.get("allOf", []), *rules]


def exactly_one_with(trigger: str, *names: str) -> JsonSchemaRule:
    """With ``trigger`` given, exactly one of ``names``; without it, none of them."""
    return {"if": given(trigger), "then": exactly_one(*names), "else": {"allOf": [absent(n) for n in names]}}


def needs_at_least(dependents: tuple[str, ...], field: str, minimum: int) -> JsonSchemaRule:
    """Any of ``dependents`` given only with ``field`` given and at least ``minimum``."""
    return {
        "if": {"anyOf": [given(name) for name in dependents]},
        "then": {"required": [field], "properties": {field: {"minimum": minimum}}},
    }


#: The ``code`` of a validation error whose rule JSON Schema cannot state (one field a multiple of
#: another, a divisor of a product): the rule is in the field's or the model's description instead,
#: and the contract test lets a schema-valid request be refused for it, and for nothing else.
RULE_IN_DESCRIPTION = "rule_in_description"
