"""The one rule for execution ids (and Commission case ids), checked at every entry.

An execution id names a Firestore document, a URL path segment, a blob key segment (a
directory on a local disk) and a field of every log line, so it must be safe in all four.
The rule:

* 1 to :data:`MAX_ID_BYTES` (255) bytes of UTF-8: a file name holds at most 255 bytes, and
  Firestore document ids at most 1,500;
* no ``/`` or ``\\`` (path separators of Firestore, URLs, blob keys and file systems);
* no control, format, surrogate or line/paragraph-separator character (Unicode categories
  ``Cc``, ``Cf``, ``Cs``, ``Zl``, ``Zp``: newlines break log lines and URLs, bidi overrides
  disguise ids in logs, surrogates are not UTF-8);
* no leading or trailing whitespace (invisible, and trimmed by many tools);
* not starting with ``.`` (rules out ``.`` and ``..``, and hidden files in a blob directory);
* not ``__…__`` (Firestore reserves ids that start and end with two underscores).

Anything else is allowed, letters of any script, spaces inside, ``:``, ``#``, ``%``, ``?``
included (a URL carries them percent-encoded). Ids are never normalized: a valid id is
stored and returned byte for byte.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from loom.errors import InvalidExecutionIdError

MAX_ID_BYTES = 255
#: Case ids leave room for ``commission.case:`` and ``:{revision}:{step}`` in execution ids.
MAX_CASE_ID_BYTES = 200
_BANNED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def rule(max_bytes: int = MAX_ID_BYTES) -> str:
    """The rule in one line, for error messages."""
    return (
        f"1-{max_bytes} UTF-8 bytes; no '/', backslash, control or format characters; no leading "
        "or trailing whitespace; not starting with '.'; not '__...__'"
    )


def id_problem(value: object, *, max_bytes: int = MAX_ID_BYTES) -> str | None:
    """What is wrong with ``value`` as an id, or ``None`` if it follows the rule."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if len(value) > max_bytes:  # checked first, so a huge value is never scanned or cached
        return f"must be at most {max_bytes} UTF-8 bytes, not {len(value.encode('utf-8', 'surrogatepass'))}"
    return _problem(value, max_bytes)


@lru_cache(maxsize=4096)
def _problem(value: str, max_bytes: int) -> str | None:
    # Cached: the hot path checks the same id on every append of an execute call.
    if not value:
        return "must not be empty"
    if any(unicodedata.category(ch) in _BANNED_CATEGORIES for ch in value):
        return "must not contain control, format or line-separator characters"
    size = len(value.encode("utf-8"))  # no surrogates left (category Cs), so this encodes
    if size > max_bytes:
        return f"must be at most {max_bytes} UTF-8 bytes, not {size}"
    if "/" in value or "\\" in value:
        return "must not contain '/' or a backslash"
    if value != value.strip():
        return "must not start or end with whitespace"
    if value.startswith("."):
        return "must not start with '.'"
    if len(value) >= 4 and value.startswith("__") and value.endswith("__"):
        return "must not be of the form '__...__' (reserved)"
    return None


def name_problem(value: object, *, max_bytes: int) -> str | None:
    """What is wrong with ``value`` as a message topic or message id, or ``None``.

    The id rule's alphabet (no control, format, surrogate or line-separator character, no
    leading or trailing whitespace: they break log lines and disguise names), without its
    path rules: a topic or message id never names a document, URL segment or file, so
    ``/``, a leading ``.`` and ``__x__`` are allowed in them.
    """
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > max_bytes:
        return f"must be at most {max_bytes} UTF-8 bytes"
    if any(unicodedata.category(ch) in _BANNED_CATEGORIES for ch in value):
        return "must not contain control, format or line-separator characters"
    if len(value.encode("utf-8")) > max_bytes:
        return f"must be at most {max_bytes} UTF-8 bytes"
    if value != value.strip():
        return "must not start or end with whitespace"
    return None


def check_execution_id(value: str, *, what: str = "execution id") -> str:
    """Return ``value`` if it is a valid execution id.

    Raises:
        InvalidExecutionIdError: It breaks the rule (the message says which part).
    """
    if type(value) is str and value in _VALID:  # checked before: one set lookup, no calls
        return value
    problem = id_problem(value)
    if problem is not None:
        raise _invalid(what, value, problem, MAX_ID_BYTES)
    if type(value) is str:  # (a subclass may hash or compare its own way: never remembered)
        if len(_VALID) >= _VALID_MAX:
            _VALID.clear()  # a bound, not an eviction policy: the ids in use come back at once
        _VALID.add(value)
    return value


# Execution ids that passed :func:`check_execution_id`: every append and load checks its
# execution's id again, and a set lookup costs a fraction of even a cached ``id_problem``.
# Only valid ids are kept, so a bad id is always checked in full and refused as before.
_VALID: set[str] = set()
_VALID_MAX = 4096


def check_case_id(value: str) -> str:
    """Return ``value`` if it is a valid Commission case id (the same rule, shorter).

    Raises:
        InvalidExecutionIdError: It breaks the rule.
    """
    problem = id_problem(value, max_bytes=MAX_CASE_ID_BYTES)
    if problem is not None:
        raise _invalid("case id", value, problem, MAX_CASE_ID_BYTES)
    return value


def _invalid(what: str, value: str, problem: str, max_bytes: int) -> InvalidExecutionIdError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidExecutionIdError(
        f"invalid {what} {shown}: it {problem} (the rule: {rule(max_bytes)})",
        details={"rule": rule(max_bytes), "problem": problem},
    )


def _pydantic_check(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise PydanticCustomError(
            "invalid_execution_id",
            "execution id {problem} (the rule: {rule})",
            {"problem": problem, "rule": rule()},
        )
    return value


#: A model field holding an execution id: refused (error type ``invalid_execution_id``,
#: naming the rule) when it breaks the rule.
ExecutionId = Annotated[
    str,
    AfterValidator(_pydantic_check),
    # Documented, not enforced by pydantic: the rule's own check names the rule.
    Field(
        description=f"An execution id: {rule()}.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_ID_BYTES},
    ),
]
