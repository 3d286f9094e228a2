"""The JSON boundary of the log: exact values, escaped user data, claim checks for big ones.

Every JSON value the engine records (start input, effect output, resume payload, verdict
output, flow output) goes through :meth:`PayloadCodec.encode`, and every one it serves back
through :meth:`PayloadCodec.decode`. The stored form is one of:

* the value itself, the common case;
* ``{"$blob": ref}``: a claim check, for a value over the size threshold; the blob holds
  the value's JSON and its key starts with the execution id;
* ``{"$loom.value": v}``: an escape, for a user value that is itself a one-key object named
  ``$blob`` or ``$loom.value``. So a reference can only be made by the engine: user JSON
  that looks like one is stored escaped and comes back as the user wrote it.

Only the top level of a stored value is ever interpreted, so nested user data is never
touched (and never walked: the escape costs nothing for ordinary values).

Values must be exact JSON: a non-finite number (``NaN``, ``±Infinity``, or ``1e400``, which
parses as infinity), arrays and objects nested more than :data:`MAX_DEPTH` levels deep (the
event parser could not read them back) or a lone surrogate is refused with
:class:`~loom.errors.InvalidPayloadError` (``code="non_finite_number"``, ``"too_deep"`` or
``"invalid_json"``) instead of being stored and failing later.

Decoding checks that a reference names a blob of the execution being decoded, so one
execution can never read another's blob: anything else is a
:class:`~loom.errors.BlobRefError`. A missing blob is a
:class:`~loom.errors.BlobNotFoundError`, never a silent ``None``.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any, cast

from pydantic_core import PydanticSerializationError

from loom.errors import BlobRefError, ConfigurationError, InvalidPayloadError, PayloadTooLargeError
from loom.events import (
    SCHEMA_VERSION,
    ErrorInfo,
    ExecutionCompleted,
    ExecutionFailed,
    unvalidated,
)
from loom.ids import check_execution_id, id_problem
from loom.kernel.defs import to_json_value

if TYPE_CHECKING:
    from loom.blobs import BlobStore

DEFAULT_THRESHOLD = 256 * 1024
REF_KEY = "$blob"
ESCAPE_KEY = "$loom.value"
_RESERVED = frozenset({REF_KEY, ESCAPE_KEY})
# What ``json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)``
# builds on every call, built once: encoding keeps no state between calls.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# The event parser refuses JSON nested deeper than 200 levels and the snapshot codec 255, a
# value among an event's fields sits a few levels down: what goes deeper is refused.
MAX_DEPTH = 128


def dump_exact(value: Any, what: str = "value") -> bytes:
    """``value`` as compact UTF-8 JSON, refusing anything JSON cannot hold exactly.

    Raises:
        InvalidPayloadError: A non-finite number, a lone surrogate, or a non-JSON value;
            the message names where it is (``$.a[2].b``).
    """
    try:
        if type(value) is int:  # the encoder's own form of an int, without building an encoder
            return int.__repr__(value).encode()
        text = _ENCODER.encode(value)
        # Only a long text with many brackets can nest that deep: most values skip the walk.
        if len(text) > 2 * MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH:
            where = _too_deep_path(value, "$", MAX_DEPTH)
            if where is not None:
                shown = where if len(where) <= 80 else f"{where[:40]}...{where[-37:]}"
                raise InvalidPayloadError(
                    f"{what} nests arrays and objects deeper than {MAX_DEPTH} levels (at {shown})",
                    details={"path": where, "limit": MAX_DEPTH},
                    code="too_deep",
                )
        return text.encode()
    except InvalidPayloadError:
        raise
    except ValueError as exc:
        where = _non_finite_path(value, "$")
        if where is not None:
            raise InvalidPayloadError(
                f"{what} has a non-finite number at {where} (NaN, Infinity, or a number too "
                "large for a 64-bit float such as 1e400); JSON cannot hold it exactly",
                details={"path": where},
                code="non_finite_number",
            ) from None
        raise InvalidPayloadError(f"{what} is not JSON: {exc}", code="invalid_json") from None
    except (UnicodeEncodeError, TypeError, RecursionError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON: {exc}", code="invalid_json") from None


_CANONICAL = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
)


def canonical_json(value: Any) -> str:
    """``value``'s JSON text with sorted keys: equal for equal JSON values, and only for
    them (``1``, ``1.0`` and ``true`` differ, as Python's ``==`` does not tell; the order of
    an object's keys does not matter). How repeated starts and messages are compared."""
    return _CANONICAL.encode(value)


def check_exact(value: Any, what: str = "value") -> Any:
    """Return ``value`` if :func:`dump_exact` accepts it; else its ``InvalidPayloadError``."""
    dump_exact(value, what)
    return value


def _too_deep_path(value: Any, path: str, left: int) -> str | None:
    """Where ``value`` nests arrays and objects more than ``left`` levels deep."""
    children: Any = ()
    if isinstance(value, dict):
        children = ((f"{path}.{k}", v) for k, v in cast(dict[Any, Any], value).items())
    elif isinstance(value, list | tuple):
        children = ((f"{path}[{i}]", v) for i, v in enumerate(cast(list[Any], value)))
    else:
        return None
    if left == 0:
        return path
    for where, child in children:
        found = _too_deep_path(child, where, left - 1)
        if found is not None:
            return found
    return None


def _non_finite_path(value: Any, path: str) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for k, v in cast(dict[Any, Any], value).items():
            found = _non_finite_path(v, f"{path}.{k}")
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(cast(list[Any], value)):
            found = _non_finite_path(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _escape(value: Any) -> Any:
    if not isinstance(value, dict):  # (no ``cast`` call: every output passes here)
        return value
    mapping: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    if len(mapping) == 1 and next(iter(mapping)) in _RESERVED:
        return {ESCAPE_KEY: mapping}
    return mapping


class PayloadCodec:
    """Encodes values for the log and decodes them back (see the module docstring).

    Args:
        blobs: Where values over ``threshold`` go; ``None`` refuses them.
        threshold: The largest value (bytes of JSON) stored inline.
    """

    def __init__(self, blobs: BlobStore | None = None, threshold: int = DEFAULT_THRESHOLD):
        self.blobs = blobs
        self.threshold = threshold

    def inline(self, value: Any, raw: bytes) -> tuple[Any, int] | None:
        """``(stored, size)`` of a value stored in the log itself, or ``None`` when it is over
        the threshold (then :meth:`encode` offloads it). ``raw`` is ``dump_exact(value)``.

        What :meth:`encode` returns for a small value, without its coroutine: the hot path
        of an effect's output, whose JSON was already checked when the effect returned.
        """
        size = len(raw)
        if not 0 < size <= self.threshold:  # (b"": unknown)
            return None
        return (_escape(value) if isinstance(value, dict) else value), size  # (a call less)

    def too_large(self, size: int, what: str) -> ErrorInfo | None:
        """Why a value of ``size`` JSON bytes (``what``, e.g. "step 3's output") cannot be
        recorded: over the inline limit with no blob store to take it; else ``None``.

        Recorded as the step's (or the execution's) failure, code ``output_too_large``: the
        value will be as large on every redelivery, so raising (as :meth:`encode` does, for
        the values it refuses as input) ran an idempotent effect again on each until the
        execution was parked as poison.
        """
        if self.blobs is not None or size <= self.threshold:
            return None
        message = (
            f"{what} is {size} bytes, over the {self.threshold}-byte limit of a value kept in "
            "the log, and no blob store is configured to take it; a blob store (LOOM_BLOBS, "
            "or Runtime(blobs=...)) lifts the limit"
        )
        return ErrorInfo(code="output_too_large", type=None, message=message)

    async def encode(self, value: Any, key: str, raw: bytes | None = None) -> tuple[Any, int]:
        """Return ``(stored, size)``: the stored form of ``value`` and its JSON size in bytes.

        Args:
            value: A JSON value.
            key: ``"{execution_id}/{what}"``: where a blob would go. The execution id is
                checked, so a key never leaves the execution's part of the blob store.
            raw: ``dump_exact(value)`` when the caller already has it (not encoded again).

        Raises:
            InvalidPayloadError: Not exact JSON (see :func:`dump_exact`).
            InvalidExecutionIdError: The key does not start with a valid execution id.
            PayloadTooLargeError: Over the threshold with no blob store (a start input or
                resume payload: 413; a value the flow records: raised into the flow).
        """
        raw = raw or dump_exact(value)
        size = len(raw)
        if size <= self.threshold:
            return _escape(value), size
        if self.blobs is None:  # (bad input, not a setting: the same value fails every time)
            raise PayloadTooLargeError(
                f"a payload of {size} bytes exceeds the {self.threshold}-byte limit of a value "
                "kept in the log and no blob store is configured to take it; a blob store "
                "(LOOM_BLOBS, or Runtime(blobs=...)) lifts the limit",
                details={"size": size, "limit": self.threshold},
            )
        check_execution_id(key.split("/", 1)[0])
        # Blob keys are write-once; the content hash keeps an idempotent effect that returns
        # other bytes on a re-run (after a crash) from colliding with its first output.
        ref = await self.blobs.put(f"{key}/{hashlib.sha256(raw).hexdigest()[:16]}", raw)
        return {REF_KEY: ref}, size

    async def decode(self, stored: Any, execution_id: str) -> Any:
        """The value a stored form stands for; a blob is read only if it is ``execution_id``'s.

        Raises:
            BlobRefError: The reference names a blob outside the execution's own.
            BlobNotFoundError: The blob is missing.
            ConfigurationError: The log holds a reference and no blob store is set.
        """
        if not isinstance(stored, dict):
            return stored
        mapping = cast(dict[str, Any], stored)
        if len(mapping) != 1:
            return mapping
        if ESCAPE_KEY in mapping:
            return mapping[ESCAPE_KEY]
        if REF_KEY not in mapping:
            return mapping
        if self.blobs is None:
            raise ConfigurationError("the log references a blob but no blob store is set")
        ref = self._own_ref(mapping[REF_KEY], execution_id)
        return json.loads(await self.blobs.get(ref))

    def _own_ref(self, ref: Any, execution_id: str) -> str:
        assert self.blobs is not None
        try:
            if not isinstance(ref, str):
                raise ValueError("a reference is a string")
            key = self.blobs.key_of(ref)
        except ValueError as exc:
            raise BlobRefError(
                f"execution {execution_id!r} logs a blob reference this blob store did not "
                f"issue: {ref!r} ({exc})",
                details={"execution_id": execution_id, "ref": repr(ref)},
            ) from None
        if id_problem(execution_id) is not None or not key.startswith(f"{execution_id}/"):
            raise BlobRefError(
                f"execution {execution_id!r} logs a reference to another execution's blob "
                f"({ref!r}); refused",
                details={"execution_id": execution_id, "ref": ref},
            )
        return ref


async def completion_event(
    codec: PayloadCodec, result: Any, execution_id: str
) -> ExecutionCompleted | ExecutionFailed:
    """How a flow's return value is recorded: completed with its stored form, or failed
    with ``code="invalid_output"`` when it is not exact JSON (never stored as ``null``), or
    ``code="output_too_large"`` when it is over the inline limit with no blob store."""
    try:
        value = to_json_value(result)
        raw = dump_exact(value, "the flow's output")
        too_large = codec.too_large(len(raw), "the flow's output")
        if too_large is not None:
            return ExecutionFailed(error=too_large)
        stored, _ = await codec.encode(value, f"{execution_id}/output", raw)
    # (ValueError too: bytes that are not UTF-8 raise UnicodeDecodeError, a too deep value
    # ValueError; either escaped as a bare 500, retried until the execution was poison.)
    except (InvalidPayloadError, PydanticSerializationError, ValueError) as exc:
        return _output_refused(exc)
    return _completed(stored)


def completion_inline(
    codec: PayloadCodec, result: Any
) -> ExecutionCompleted | ExecutionFailed | None:
    """:func:`completion_event` without its coroutine, when the output is stored inline (most
    are) or is not exact JSON; ``None`` when it is over the inline limit (for the blob store,
    or too large: await ``completion_event``)."""
    try:
        value = to_json_value(result)
        raw = dump_exact(value, "the flow's output")
    except (InvalidPayloadError, PydanticSerializationError, ValueError) as exc:
        return _output_refused(exc)
    inline = codec.inline(value, raw)
    return None if inline is None else _completed(inline[0])


def _output_refused(exc: Exception) -> ExecutionFailed:
    message = exc.message if isinstance(exc, InvalidPayloadError) else str(exc)
    return ExecutionFailed(
        error=ErrorInfo(
            code="invalid_output",
            type="InvalidPayloadError",
            message=f"the flow's output was not recorded: {message}",
        )
    )


def _completed(stored: Any) -> ExecutionCompleted:
    # ``ExecutionCompleted(output=stored)`` unvalidated: ``encode`` checked the output.
    values = {
        "schema_version": SCHEMA_VERSION,
        "seq": 0,
        "at": 0.0,
        "type": "ExecutionCompleted",
        "output": stored,
    }
    return unvalidated(ExecutionCompleted, values, {"output"})
