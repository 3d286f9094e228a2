"""A small JSON Schema validator: the subset catalogs use, with no dependency.

Supported: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``minItems``/``maxItems``, ``uniqueItems``,
``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum`` and their exclusive forms,
``multipleOf``, ``anyOf``/``oneOf``/``allOf``/``not``, local ``$ref`` into ``$defs`` or
``definitions``, and boolean schemas. Annotations (``title``, ``description``, ``format``…)
are ignored. Any other keyword is refused when the schema is checked, so a schema never
silently validates less than it says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from loom.errors import ConfigurationError

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "$schema",
        "$id",
        "$comment",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$defs",
        "definitions",
        "discriminator",
    }
)
_TYPES: dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
_SUBSCHEMAS = ("items", "not", "additionalProperties")


def check_schema(schema: Any, where: str = "#", root: Any = None) -> None:
    """Raise :class:`~loom.errors.ConfigurationError` if ``schema`` uses what we cannot check."""
    root = schema if root is None else root
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"schema at {where} must be an object or a boolean")
    node = cast(Mapping[str, Any], schema)
    unknown = sorted(set(node) - (_ANNOTATIONS | _CHECKS.keys() | {"$ref"}))
    if unknown:
        raise ConfigurationError(f"schema at {where} uses unsupported keyword(s) {unknown}")
    for key in _SUBSCHEMA_MAPS:
        subs = cast(Mapping[str, Any], node.get(key) or {})
        for name, sub in subs.items():
            check_schema(sub, f"{where}/{key}/{name}", root)
    for key in _SUBSCHEMA_LISTS:
        for i, sub in enumerate(node.get(key) or []):
            check_schema(sub, f"{where}/{key}/{i}", root)
    for key in _SUBSCHEMAS:
        if key in node:
            check_schema(node[key], f"{where}/{key}", root)
    if "$ref" in node:
        _check_ref(str(node["$ref"]), where, root)


def _check_ref(ref: str, where: str, root: Any) -> None:
    match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
    if match is None:
        raise ConfigurationError(f"schema at {where}: only local $ref into $defs is supported")
    if match.group(2) not in (root.get(match.group(1)) or {}):
        raise ConfigurationError(f"schema at {where}: $ref {ref!r} points at nothing")


def validate(value: Any, schema: Any) -> list[str]:
    """Every way ``value`` fails ``schema``, as ``"path: message"`` lines (empty = valid)."""
    errors: list[str] = []
    _Validator(schema, errors).run(value, schema, "$")
    return errors


class _Validator:
    def __init__(self, root: Any, errors: list[str]) -> None:
        self.root = root
        self.errors = errors

    def run(self, value: Any, schema: Any, path: str) -> None:
        if schema is True:
            return
        if schema is False:
            self.errors.append(f"{path}: no value is allowed here")
            return
        if "$ref" in schema:
            _, section, name = str(schema["$ref"]).split("/", 2)
            self.run(value, self.root[section][name], path)
        for key, check in _CHECKS.items():
            if key in schema:
                check(self, value, schema, path)

    def ok(self, value: Any, schema: Any, path: str) -> bool:
        sub = _Validator(self.root, [])
        sub.run(value, schema, path)
        return not sub.errors


def _type(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    types = cast(list[str], s["type"] if isinstance(s["type"], list) else [s["type"]])
    if not any(_TYPES[t](value) for t in types):
        v.errors.append(f"{path}: expected {' or '.join(types)}, got {_name(value)}")


def _enum(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if not any(_same(value, option) for option in s["enum"]):
        v.errors.append(f"{path}: {value!r} is not one of {s['enum']!r}")


def _const(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if not _same(value, s["const"]):
        v.errors.append(f"{path}: expected {s['const']!r}")


def _properties(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if isinstance(value, dict):
        for name, sub in s["properties"].items():
            if name in value:
                v.run(value[name], sub, f"{path}.{name}")


def _required(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if isinstance(value, dict):
        for name in s["required"]:
            if name not in value:
                v.errors.append(f"{path}: missing required property {name!r}")


def _additional(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if isinstance(value, dict):
        declared = cast(Mapping[str, Any], s.get("properties") or {})
        for name, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            if name not in declared:
                v.run(item, s["additionalProperties"], f"{path}.{name}")


def _items(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if isinstance(value, list):
        for i, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType,reportUnknownArgumentType]
            v.run(item, s["items"], f"{path}[{i}]")


def _bound(
    key: str,
    measure: Callable[[Any], Any],
    applies: Callable[[Any], bool],
    fails: Callable[[Any, Any], bool],
    text: str,
) -> Callable[..., None]:
    def check(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
        if applies(value) and fails(measure(value), s[key]):
            v.errors.append(f"{path}: {text} {s[key]!r}")

    return check


def _is_num(value: Any) -> bool:
    return _TYPES["number"](value)


def _unique(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if s["uniqueItems"] and isinstance(value, list):
        seen = [json.dumps(i, sort_keys=True) for i in value]  # pyright: ignore[reportUnknownVariableType]
        if len(set(seen)) != len(seen):
            v.errors.append(f"{path}: items are not unique")


def _pattern(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if isinstance(value, str) and re.search(s["pattern"], value) is None:
        v.errors.append(f"{path}: does not match {s['pattern']!r}")


def _any_of(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if not any(v.ok(value, sub, path) for sub in s["anyOf"]):
        v.errors.append(f"{path}: matches none of anyOf")


def _one_of(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    matched = sum(v.ok(value, sub, path) for sub in s["oneOf"])
    if matched != 1:
        v.errors.append(f"{path}: matches {matched} of oneOf, expected exactly 1")


def _all_of(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    for sub in s["allOf"]:
        v.run(value, sub, path)


def _not(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if v.ok(value, s["not"], path):
        v.errors.append(f"{path}: must not match the 'not' schema")


def _multiple(v: _Validator, value: Any, s: Mapping[str, Any], path: str) -> None:
    if _is_num(value) and (value / s["multipleOf"]) % 1 != 0:
        v.errors.append(f"{path}: not a multiple of {s['multipleOf']!r}")


def _same(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1, and 1 == 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _name(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _lt(a: Any, b: Any) -> bool:
    return a < b


def _gt(a: Any, b: Any) -> bool:
    return a > b


def _le(a: Any, b: Any) -> bool:
    return a <= b


def _ge(a: Any, b: Any) -> bool:
    return a >= b


def _ident(value: Any) -> Any:
    return value


_CHECKS: dict[str, Callable[..., None]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    "items": _items,
    "uniqueItems": _unique,
    "pattern": _pattern,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "allOf": _all_of,
    "not": _not,
    "multipleOf": _multiple,
    "minLength": _bound("minLength", len, _is_str, _lt, "shorter than"),
    "maxLength": _bound("maxLength", len, _is_str, _gt, "longer than"),
    "minItems": _bound("minItems", len, _is_list, _lt, "fewer items than"),
    "maxItems": _bound("maxItems", len, _is_list, _gt, "more items than"),
    "minimum": _bound("minimum", _ident, _is_num, _lt, "less than"),
    "maximum": _bound("maximum", _ident, _is_num, _gt, "greater than"),
    "exclusiveMinimum": _bound("exclusiveMinimum", _ident, _is_num, _le, "not greater than"),
    "exclusiveMaximum": _bound("exclusiveMaximum", _ident, _is_num, _ge, "not less than"),
}
