"""An event's stored JSON written by orjson, where orjson writes exactly pydantic's bytes.

Stores keep an event as ``model_dump_json()`` writes it, and serializing through pydantic
costs several times what orjson takes for the same dict: paid on every event written.
The two agree byte for byte on the values an event holds (both write floats the same
shortest way, ``1e-7``, ``0.00001``, ``1e+16``, and ``null`` for a non-finite one, strings
with the same escapes and raw non-ASCII, keys in the order of the model's field dict), so
:func:`fast_json` hands orjson the model's field dict only when it can tell that nothing in
it is written differently, and answers ``None`` otherwise, for the caller to ask pydantic:

* the class writes its fields plainly (no alias, exclusion, serializer, computed field or
  extra fields; non-finite floats as ``null``), each field's type is a JSON scalar, a
  ``Literal`` of strings, ``Any``, ``list[str]``, ``dict[str, str | int | float]`` or an
  optional one of these (a field of another type sends the class to pydantic, except the
  ``None`` of an optional one);
* the field dict holds every field and nothing else (pydantic writes them in the dict's
  order, as orjson does), each value of exactly a type its field declares (a ``float``
  field holding an ``int``, which pydantic writes ``1.0``, or an ``int`` one holding a
  ``bool``, goes to pydantic, and so does any value pydantic would warn about);
* inside ``Any`` values orjson is told to refuse subclasses of built-in types, dataclasses
  and dates, and refuses on its own integers beyond 64 bits, non-string keys, lone
  surrogates, sets, bytes and models: any refusal goes to pydantic, which then writes the
  value or raises its own error exactly as before. (``orjson.Fragment``, raw JSON that
  pydantic refuses to write, is the one value orjson takes that pydantic does not; the
  engine puts only exact JSON values into events, see :mod:`loom.kernel.payloads`.)
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel

_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_SCALARS = (bool, int, float, str)

Writer = Callable[[Any], str]
Fast = Callable[[dict[str, Any]], "str | None"]
Kinds = tuple[type, ...] | None  # the exact types a field may hold; None: any (orjson decides)


def pydantic_json(model: BaseModel) -> str:
    """Exactly ``model.model_dump_json()`` (the serializer's defaults are the method's),
    without the method's keyword handling."""
    return model.__pydantic_serializer__.to_json(model).decode()


# Per class: what writes its instances (orjson where certain, else pydantic), and its
# orjson part alone, or ``None`` when pydantic writes every instance.
WRITERS: dict[type, Writer] = {}
_FAST: dict[type, Fast | None] = {}


def fast_json(model: BaseModel) -> str | None:
    """``model.model_dump_json()``'s text by orjson; ``None`` where that is not certain."""
    cls = type(model)
    writer_of(cls)
    fast = _FAST[cls]
    return None if fast is None else fast(model.__dict__)  # pyright: ignore[reportArgumentType]


def writer_of(cls: type[BaseModel]) -> Writer:
    """The writer of ``cls``'s instances (made once, kept in :data:`WRITERS`)."""
    found = WRITERS.get(cls)
    if found is None:
        compiled = _compile(cls)
        _FAST[cls] = None if compiled is None else compiled[0]
        found = WRITERS[cls] = pydantic_json if compiled is None else compiled[1]
    return found


# The code of one class: its check is one expression, compiled into the write (a Python
# call per field, or a call for the check, would cost a good part of orjson's write).
_CODE = """
def fast(v):
    try:
        if {check}:
            return dumps(v, option=options).decode()
    except (KeyError, TypeError):  # a field missing; a value orjson writes otherwise
        pass  # (orjson.JSONEncodeError is a TypeError)
    return None

def write(model):
    v = model.__dict__
    try:
        if {check}:
            return dumps(v, option=options).decode()
    except (KeyError, TypeError):
        pass
    return model.__pydantic_serializer__.to_json(model).decode()
"""


def _compile(cls: type[BaseModel]) -> tuple[Fast, Writer] | None:
    """The orjson writer of ``cls``'s field dicts and the writer of its instances (orjson,
    else pydantic), or ``None``: pydantic writes them all."""
    config = cls.model_config
    decorators = cls.__pydantic_decorators__
    if (
        config.get("extra") == "allow"
        or config.get("ser_json_inf_nan", "null") != "null"
        or config.get("json_encoders")
        or decorators.field_serializers
        or decorators.model_serializers
        or cls.model_computed_fields
    ):
        return None
    # With as many keys as fields and every field found, the dict holds the fields alone
    # (pydantic skips a key that is no field, orjson would write it).
    terms = [f"len(v) == {len(cls.model_fields)}"]
    names: dict[str, Any] = {"dumps": orjson.dumps, "options": _OPTIONS}
    for index, (name, info) in enumerate(cls.model_fields.items()):
        if (
            info.alias
            or info.serialization_alias
            or info.exclude
            or getattr(info, "exclude_if", None)  # (pydantic 2.11 on: excluded by value)
        ):
            return None
        try:
            kinds, contents = _kinds(info.annotation)
        except _Unsupported:
            return None
        term = f"{name!r} in v"  # (a field of any type: only there)
        if kinds is not None:
            names[f"k{index}"] = kinds[0] if len(kinds) == 1 else frozenset(kinds)
            term = f"type(v[{name!r}]) {'is' if len(kinds) == 1 else 'in'} k{index}"
        if contents is not None:
            names[f"c{index}"] = contents
            term = f"{term} and c{index}(v[{name!r}])"
        terms.append(term)
    exec(_CODE.format(check=" and ".join(terms)), names)  # (built from field names only)
    return names["fast"], names["write"]


class _Unsupported(Exception):
    """A field type whose values orjson may write otherwise than pydantic."""


def _kinds(annotation: Any) -> tuple[Kinds, Callable[[Any], bool] | None]:
    """The exact types a field of ``annotation`` may hold, and a check of a value's contents
    where its type alone does not tell.

    A type pydantic writes by its value's own type (``Any``) takes any value: orjson writes
    what it can exactly as pydantic does and refuses the rest. A declared type pydantic
    writes its own way only where orjson would write the same: a ``float`` field holding an
    ``int`` is written ``1.0`` by pydantic, an ``int`` one holding ``True`` is written ``1``.
    """
    if annotation is Any:
        return None, None
    if annotation in _SCALARS:
        return (annotation,), None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal and all(type(arg) is str for arg in args):
        return (str,), None  # (pydantic writes a string outside the choices as it is)
    if (origin is types.UnionType or origin is Union) and len(args) == 2 and type(None) in args:
        return _optional(args[0] if args[1] is type(None) else args[1])
    if origin is list and args == (str,):
        return (list,), _all_str
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in (str, int, float):
        kind: type = args[1]
        return (dict,), lambda value: _all_str(value) and _all_of(kind, value.values())
    raise _Unsupported(annotation)


def _optional(inner: Any) -> tuple[Kinds, Callable[[Any], bool] | None]:
    """``X | None``: ``None``, and ``X`` where orjson can write it as pydantic does."""
    try:
        kinds, contents = _kinds(inner)
    except _Unsupported:
        return (type(None),), None  # (e.g. a model: only the ``None`` goes to orjson)
    if kinds is None:
        return None, None
    if contents is None:
        return (*kinds, type(None)), None
    inner_contents = contents
    return (*kinds, type(None)), lambda value: value is None or inner_contents(value)


def _all_str(values: Any) -> bool:
    """Every item (every key of a dict) is exactly a ``str``."""
    return all(type(value) is str for value in values)


def _all_of(kind: type, values: Any) -> bool:
    return all(type(value) is kind for value in values)
