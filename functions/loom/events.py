"""The event schema: immutable, past-tense facts in a per-execution, gap-free log.

Every event carries ``type`` (its discriminator), ``schema_version``, ``seq`` (its
1-based position in the execution's log) and ``at`` (wall-clock seconds since the epoch when
the runtime recorded it; the fold never reads a clock, only this field).

JSON values inside events (``input``, ``output``, ``payload``) are stored as given, with two
exceptions made by :mod:`loom.kernel.payloads`: a value over the blob threshold is replaced by
``{"$blob": "<ref>"}`` (a claim check), and a user value of that very shape is escaped as
``{"$loom.value": ...}``; both are read back transparently by the runtime.

The models are defined by family in the private package ``loom._events`` (what every event
shares; an execution's life; its steps; the flow primitives) and exported from here, the one
import path, with the ``Event`` union built of them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field, TypeAdapter

from loom._events.base import SCHEMA_VERSION, ErrorInfo, ForkOrigin
from loom._events.base import EventBase as _Event
from loom._events.execution import (
    CancelDelivered,
    CancelRequested,
    ExecutionCancelled,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionContinued,
    ExecutionDequeued,
    ExecutionFailed,
    ExecutionForked,
    ExecutionParked,
    ExecutionResumed,
    ExecutionRetried,
    ExecutionStarted,
    ExecutionSuspended,
)
from loom._events.primitives import (
    ChildCancelRequested,
    ChildShared,
    ChildStarted,
    EventAwaited,
    EventPublished,
    EventRead,
    MessageReceived,
    MessageSent,
    StreamClosed,
    StreamWritten,
    UpdateAccepted,
    UpdateCompleted,
)
from loom._events.steps import (
    DecisionRecorded,
    EffectCompleted,
    EffectFailed,
    EffectInDoubt,
    EffectRetried,
    EffectStarted,
    EffectVerdict,
    PatchRecorded,
)
from loom.event_json import WRITERS, writer_of

__all__ = [  # noqa: RUF022 - in source order
    "SCHEMA_VERSION",
    "ForkOrigin",
    "ExecutionStarted",
    "ExecutionClaimed",
    "ExecutionDequeued",
    "EffectStarted",
    "EffectCompleted",
    "ErrorInfo",
    "EffectFailed",
    "EffectRetried",
    "DecisionRecorded",
    "PatchRecorded",
    "ExecutionSuspended",
    "ExecutionResumed",
    "EffectInDoubt",
    "EffectVerdict",
    "ExecutionParked",
    "ExecutionRetried",
    "ExecutionForked",
    "MessageReceived",
    "MessageSent",
    "EventPublished",
    "UpdateAccepted",
    "UpdateCompleted",
    "EventAwaited",
    "EventRead",
    "StreamWritten",
    "StreamClosed",
    "ExecutionContinued",
    "ExecutionCompleted",
    "ExecutionFailed",
    "ChildStarted",
    "ChildCancelRequested",
    "ChildShared",
    "CancelRequested",
    "CancelDelivered",
    "ExecutionCancelled",
    "EVENT_ADAPTER",
    "EVENTS_ADAPTER",
    "TERMINAL_TYPES",
    "number",
    "unvalidated",
    "event_from_json",
    "event_from_dict",
    "event_to_json",
    "event_to_dict",
]

for _model in (
    _Event,
    ForkOrigin,
    ExecutionStarted,
    ExecutionClaimed,
    ExecutionDequeued,
    EffectStarted,
    EffectCompleted,
    ErrorInfo,
    EffectFailed,
    EffectRetried,
    DecisionRecorded,
    PatchRecorded,
    ExecutionSuspended,
    ExecutionResumed,
    EffectInDoubt,
    EffectVerdict,
    ExecutionParked,
    ExecutionRetried,
    ExecutionForked,
    MessageReceived,
    MessageSent,
    EventPublished,
    UpdateAccepted,
    UpdateCompleted,
    EventAwaited,
    EventRead,
    StreamWritten,
    StreamClosed,
    ExecutionContinued,
    ExecutionCompleted,
    ExecutionFailed,
    ChildStarted,
    ChildCancelRequested,
    ChildShared,
    CancelRequested,
    CancelDelivered,
    ExecutionCancelled,
):
    _model.__module__ = __name__  # the public path, which pickles name
del _model

M = TypeVar("M", bound=BaseModel)


Event = Annotated[
    ExecutionStarted
    | ExecutionClaimed
    | ExecutionDequeued
    | EffectStarted
    | EffectCompleted
    | EffectFailed
    | EffectRetried
    | DecisionRecorded
    | PatchRecorded
    | ExecutionSuspended
    | ExecutionResumed
    | EffectInDoubt
    | EffectVerdict
    | ExecutionParked
    | ExecutionRetried
    | ExecutionForked
    | MessageReceived
    | MessageSent
    | EventPublished
    | UpdateAccepted
    | UpdateCompleted
    | EventAwaited
    | EventRead
    | StreamWritten
    | StreamClosed
    | ExecutionContinued
    | ExecutionCompleted
    | ExecutionFailed
    | ChildStarted
    | ChildCancelRequested
    | ChildShared
    | CancelRequested
    | CancelDelivered
    | ExecutionCancelled,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENTS_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])

TERMINAL_TYPES = frozenset({"ExecutionCompleted", "ExecutionFailed", "ExecutionCancelled"})


def number(events: Sequence[Event], after_seq: int, at: float) -> None:
    """Give not-yet-appended events their seqs (``after_seq + 1, …``) and time, in place.

    Events are frozen once shared; before their append nobody else holds them, and setting
    the two fields directly saves a model copy per event on the hot path (in the instance
    dict, where a model keeps its field values: ``object.__setattr__`` would first look the
    names up through the class).
    """
    for offset, event in enumerate(events, start=1):
        values: dict[str, Any] = event.__dict__  # pyright: ignore[reportAssignmentType]
        values["seq"] = after_seq + offset
        values["at"] = at


def unvalidated(cls: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """The event (or other model) ``cls(**fields)`` would build, from values the engine
    itself produced, without checking them against the schema again.

    Validation costs microseconds an event, paid on every step for values of the right
    types by construction (ids, counts, times, an output ``loom.kernel.payloads.dump_exact``
    checked). Never for values from outside the engine: those go through ``cls(...)``.

    Args:
        cls: The event class (any model with no aliases and no private attributes).
        values: Every field of ``cls``, in the class's field order (the serializer writes
            them in the order of this dict), defaults included.
        fields_set: The fields the caller gave (``model_fields_set``).
    """
    event = _new(cls)
    _setattr(event, "__dict__", values)
    _FIELDS_SET.__set__(event, fields_set)
    _EXTRA.__set__(event, None)
    _PRIVATE.__set__(event, None)
    return event


# The slots a model keeps its state in, set directly (``model_construct`` does the same
# through several layers, and ``object.__setattr__`` looks each name up through the class).
_new = object.__new__
_setattr = object.__setattr__
_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"]
_EXTRA = BaseModel.__dict__["__pydantic_extra__"]
_PRIVATE = BaseModel.__dict__["__pydantic_private__"]


def event_from_json(data: str | bytes) -> Event:
    """Parse one event from its JSON form, validating it against the schema."""
    return EVENT_ADAPTER.validate_json(data)


def event_from_dict(data: dict[str, Any]) -> Event:
    """Build one event from a JSON-able dict, validating it against the schema."""
    return EVENT_ADAPTER.validate_python(data)


def event_to_json(event: Event) -> str:
    """The canonical JSON form of an event, as stores keep it.

    Exactly ``event.model_dump_json()``: written by orjson where it writes the same bytes
    (:mod:`loom.event_json`, a fifth of the cost, paid once per event written), else by the
    model's serializer directly (the method's defaults, without its keyword handling).
    """
    cls = type(event)
    return (WRITERS[cls] if cls in WRITERS else writer_of(cls))(event)


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-able dict of an event."""
    return event.model_dump(mode="json")
