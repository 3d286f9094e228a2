"""The snapshot codec: orjson, and Python's own ``json`` for what orjson cannot hold exactly.

A flow's values are Python values, and a Python int has no size limit; JSON has none either,
and the events (written by pydantic) keep such an int exact. orjson, which writes and reads
the folded state, does not: it refuses to write an integer outside -2**63..2**64-1 and reads
one back as a float. So each direction falls back to the standard library, exact at any
size and several times slower, only where such an integer is: for writing, when orjson
refuses; for reading, when the text has a run of 19 digits or more, which every integer
outside that range has (a long number inside a string takes the slow path too, harmlessly).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import orjson

_LONG_DIGITS = re.compile(rb"\d{19}")


def dumps(value: Any) -> bytes:
    """``value`` as JSON bytes; a dataclass writes its fields not named with a ``_``."""
    try:
        return orjson.dumps(value)
    except TypeError:  # (orjson's JSONEncodeError): an integer beyond 64 bits, most likely
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_fields)
        return text.encode()


def loads(data: bytes) -> Any:
    """The value of JSON ``data``, every integer exact."""
    if _LONG_DIGITS.search(data) is None:
        return orjson.loads(data)
    return json.loads(data)


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass as orjson writes one: its fields in order, but those named with a ``_``."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return {
        f.name: getattr(value, f.name)
        for f in dataclasses.fields(value)
        if not f.name.startswith("_")
    }
