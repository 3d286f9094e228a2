"""The event schema: immutable, past-tense facts in a per-execution, gap-free log.

Every event carries ``type`` (its discriminator), ``schema_version``, ``seq`` (its
1-based position in the execution's log) and ``at`` (wall-clock seconds since the epoch when
the runtime recorded it; the fold never reads a clock, only this field).

JSON values inside events (``input``, ``output``, ``payload``) are stored as given, with two
exceptions made by :mod:`loom.kernel.payloads`: a value over the blob threshold is replaced by
``{"$blob": "<ref>"}`` (a claim check), and a user value of that very shape is escaped as
``{"$loom.value": ...}``; both are read back transparently by the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from loom.event_json import WRITERS, writer_of

M = TypeVar("M", bound=BaseModel)

SCHEMA_VERSION = 4
"""Version 2 records who asked (``by`` on starts, resumes and cancels) and which in-doubt
episode a verdict settles (``episode``). Version 3 adds messages, published state and
continue-as-new (``MessageReceived``, ``MessageSent``, ``EventPublished``,
``ExecutionContinued``), cancellation with cleanup (``CancelRequested``,
``CancelDelivered``), child flows (``ChildStarted``, ``ExecutionStarted.parent``) and flow
timeouts (``ExecutionStarted.deadline``). Version 4 adds child handles and options
(``ChildCancelRequested``, ``ChildStarted.explicit_id``), children shared with a fork
(``ChildShared``), updates (``UpdateAccepted``, ``UpdateCompleted``), reads of another
execution's published values from a flow (``EventAwaited``, ``EventRead``) and streams
(``StreamWritten``, ``StreamClosed``), and queue options on a start (``queue_options``)
with its dequeue (``ExecutionDequeued``). Older events load unchanged: the new fields default
to ``None`` or ``False`` (nobody recorded, no parent, no deadline, an id the engine
derived)."""


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    seq: int = 0
    at: float = 0.0


class ForkOrigin(BaseModel):
    """Where a forked execution came from (``loom fork``; see :mod:`loom.ops.fork`).

    Attributes:
        execution_id: The execution forked (left untouched).
        step_id: The step the fork runs again from.
        seq: Where the copy was cut: events of the original before this seq were reused.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: str
    step_id: str
    seq: int


class ExecutionStarted(_Event):
    """First event of every execution (``forked_from`` set on a fork)."""

    type: Literal["ExecutionStarted"] = "ExecutionStarted"
    execution_id: str
    flow: str
    input: Any = None
    flow_version: str = "1"
    capabilities: list[str] = Field(default_factory=list[str])
    budgets: dict[str, float] = Field(default_factory=dict[str, float])
    by: str | None = None
    deadline: float | None = None  # the flow timeout: cancelled (with cleanup) past it
    parent: dict[str, str] | None = None  # a child flow's parent: execution_id, step_id
    forked_from: ForkOrigin | None = None
    queue: str | None = None  # started on a queue (loom.primitives.queues)
    partition_key: str | None = None
    # A queued start's options (loom.primitives.queue_options): ``priority`` (lower runs
    # first), ``dedup`` (its deduplication id), ``not_before`` (epoch seconds) and
    # ``timeout`` (seconds from its dequeue). Absent: none.
    queue_options: dict[str, str | int | float] | None = None
    # How its step ids are numbered (loom.kernel.context.STEP_NUMBERING); absent: recorded before
    # the numbering was fixed across Python versions, numbered by the task tree as it comes.
    step_numbering: int | None = None


class ExecutionClaimed(_Event):
    """A worker took ownership for one ``execute`` call, until ``until`` (epoch seconds)."""

    type: Literal["ExecutionClaimed"] = "ExecutionClaimed"
    holder: str
    until: float


class ExecutionDequeued(_Event):
    """A queued execution was first admitted by its queue (recorded with that claim):
    its ``deadline``, if the start gave a timeout from dequeue (loom.primitives.queue_options)."""

    type: Literal["ExecutionDequeued"] = "ExecutionDequeued"
    deadline: float | None = None


class EffectStarted(_Event):
    """The intent record, durable before a non-idempotent effect is invoked."""

    type: Literal["EffectStarted"] = "EffectStarted"
    step_id: str
    effect: str
    attempt: int = 1
    idempotency_key: str


class EffectCompleted(_Event):
    """An effect returned; ``output`` is what every replay serves."""

    type: Literal["EffectCompleted"] = "EffectCompleted"
    step_id: str
    effect: str
    output: Any = None
    attempts: int = 1
    duration_s: float = 0.0
    output_bytes: int = 0


class ErrorInfo(BaseModel):
    """A failure as recorded: enough to re-raise it, typed, on every replay."""

    model_config = ConfigDict(frozen=True)

    code: str = "error"
    type: str | None = None
    message: str = ""


class EffectFailed(_Event):
    """An effect failed for good; the error is raised into the flow."""

    type: Literal["EffectFailed"] = "EffectFailed"
    step_id: str
    effect: str
    error: ErrorInfo
    attempts: int = 0
    duration_s: float = 0.0


class EffectRetried(_Event):
    """Attempt ``attempt`` (2 or more) of a step is about to start, after ``error``.

    Durable before the attempt runs, so attempt numbers and the retry budget count across
    crashes (a first attempt writes nothing: an idempotent step costs one write). With
    ``not_before`` the backoff was too long to wait for inside an execute call: the attempt
    is scheduled on a durable timer and recorded again when it starts.
    """

    type: Literal["EffectRetried"] = "EffectRetried"
    step_id: str
    effect: str
    attempt: int
    error: ErrorInfo | None = None
    not_before: float | None = None  # a durable backoff: the attempt waits for this time


class DecisionRecorded(_Event):
    """A value the flow took from ``ctx.now/uuid/random``, served from the log on replay.

    ``kind="timer"`` is the deadline (epoch seconds) of a loop timer the flow created
    (``asyncio.sleep``, ``wait_for``, ``timeout``…; see :mod:`loom.kernel.loop_timers`).
    """

    type: Literal["DecisionRecorded"] = "DecisionRecorded"
    step_id: str
    kind: Literal["now", "uuid", "random", "timer"]
    value: Any


class PatchRecorded(_Event):
    """The flow took the new branch of a change (``ctx.patched``/``ctx.deprecate_patch``).

    Keyed by ``change_id``, not by position: a marker never takes a step id, so histories
    recorded before the change keep their step ids. ``step_id`` is where the flow stood when
    it first asked (for reading the log); ``deprecated`` marks a marker written by
    ``deprecate_patch``.
    """

    type: Literal["PatchRecorded"] = "PatchRecorded"
    change_id: str
    step_id: str
    deprecated: bool = False


class ExecutionSuspended(_Event):
    """A gate or timer opened; the execution waits for ``on`` + ``correlation_key``."""

    type: Literal["ExecutionSuspended"] = "ExecutionSuspended"
    step_id: str
    on: str
    correlation_key: str
    wake_at: float | None = None


class ExecutionResumed(_Event):
    """A resume arrived (possibly before its gate opened; it is then buffered).

    ``timed_out`` marks the runtime's own resume of a gate whose ``wake_at`` passed (a timer
    firing, or a gate timing out).
    """

    type: Literal["ExecutionResumed"] = "ExecutionResumed"
    on: str
    correlation_key: str
    payload: Any = None
    timed_out: bool = False
    by: str | None = None


class EffectInDoubt(_Event):
    """A rebuild found an intent record with no outcome: nobody knows if the effect ran."""

    type: Literal["EffectInDoubt"] = "EffectInDoubt"
    step_id: str
    effect: str


class EffectVerdict(_Event):
    """An operator resolved an in-doubt effect.

    ``episode`` is the seq of the :class:`EffectInDoubt` this verdict settles (``None`` in
    version 1 events): a verdict answers one episode, never a later one of the same step.
    """

    type: Literal["EffectVerdict"] = "EffectVerdict"
    step_id: str
    verdict: Literal["performed", "not_performed", "failed"]
    output: Any = None
    error: ErrorInfo | None = None
    by: str = "operator"
    episode: int | None = None


class ExecutionParked(_Event):
    """The execution stopped for an operator: replay diverged from the log (see ADR 0003)."""

    type: Literal["ExecutionParked"] = "ExecutionParked"
    reason: str
    step_id: str | None = None


class ExecutionRetried(_Event):
    """An operator let a parked execution (poison or nondeterminism) run again."""

    type: Literal["ExecutionRetried"] = "ExecutionRetried"
    by: str = "operator"


class ExecutionForked(_Event):
    """A fork's copy of its origin's prefix is complete (the ``copied`` events before it)."""

    type: Literal["ExecutionForked"] = "ExecutionForked"
    copied: int


class MessageReceived(_Event):
    """A message reached this execution's mailbox on ``topic`` (see :mod:`loom.primitives.messages`).

    ``message_id`` deduplicates: a flow's send uses ``"{sender}:{step_id}"``, so a replayed
    send is recognised; ``sender`` is the sending execution, if a flow sent it.
    """

    type: Literal["MessageReceived"] = "MessageReceived"
    topic: str
    message_id: str
    payload: Any = None
    sender: str | None = None
    by: str | None = None


class MessageSent(_Event):
    """The flow's ``ctx.send`` at ``step_id`` delivered (or failed to deliver, ``error``)."""

    type: Literal["MessageSent"] = "MessageSent"
    step_id: str
    to: str
    topic: str
    message_id: str
    error: ErrorInfo | None = None


class EventPublished(_Event):
    """The flow's ``ctx.set_event`` at ``step_id`` published ``value`` under ``key``."""

    type: Literal["EventPublished"] = "EventPublished"
    step_id: str
    key: str
    value: Any = None


class UpdateAccepted(_Event):
    """A caller's update passed the flow's validator and was accepted (see
    :mod:`loom.primitives.updates`): the flow's handler ``name`` runs on ``args``.

    ``slot`` is its place among the updates of the current run: the flow's ``slot``-th update
    gate (``loom.update`` / ``#{slot}``) receives it, so live and on replay the handler
    starts at this event's place in the log order. ``update_id`` deduplicates: a repeat
    (the same name, arguments of the same ``digest``) is answered from this record.
    """

    type: Literal["UpdateAccepted"] = "UpdateAccepted"
    update_id: str
    name: str
    args: Any = None
    digest: str = ""  # of the arguments' canonical JSON: a repeat with others is refused
    slot: int
    by: str | None = None


class UpdateCompleted(_Event):
    """The handler of update ``update_id`` returned ``output`` (or raised: ``error``); what
    every caller asking for that update is answered."""

    type: Literal["UpdateCompleted"] = "UpdateCompleted"
    update_id: str
    output: Any = None
    error: ErrorInfo | None = None


class EventAwaited(_Event):
    """The flow's ``ctx.get_event`` at ``step_id`` found nothing under ``key`` of
    ``execution_id`` and waits until ``deadline`` (epoch seconds): recorded before it waits,
    so a worker that dies meanwhile leaves its successor the time that is left."""

    type: Literal["EventAwaited"] = "EventAwaited"
    step_id: str
    execution_id: str
    key: str
    deadline: float


class EventRead(_Event):
    """The flow's ``ctx.get_event`` at ``step_id`` read ``value`` published under ``key`` by
    ``execution_id`` (``found`` false: nothing came in time); every replay is served this."""

    type: Literal["EventRead"] = "EventRead"
    step_id: str
    execution_id: str
    key: str
    found: bool = True
    value: Any = None


class StreamWritten(_Event):
    """The flow's ``ctx.write_stream`` at ``step_id`` added ``value`` to the stream ``key``
    (its values are numbered from 0 in log order; see :mod:`loom.primitives.streams`)."""

    type: Literal["StreamWritten"] = "StreamWritten"
    step_id: str
    key: str
    value: Any = None


class StreamClosed(_Event):
    """The flow's ``ctx.close_stream`` at ``step_id`` closed the stream ``key``: its readers
    have every value it will hold."""

    type: Literal["StreamClosed"] = "StreamClosed"
    step_id: str
    key: str


class ExecutionContinued(_Event):
    """The run ended by ``ctx.continue_as_new``: run ``run`` of the same execution starts
    here with ``input`` and a fresh history (see :mod:`loom.primitives.continuation`).

    ``consumed`` is how many ``ctx.recv`` calls the ended run made per topic: messages past
    them were not taken and are carried into the new run, in order.
    """

    type: Literal["ExecutionContinued"] = "ExecutionContinued"
    run: int
    input: Any = None
    consumed: dict[str, int] = Field(default_factory=dict[str, int])


class ExecutionCompleted(_Event):
    """Terminal: the flow returned ``output``."""

    type: Literal["ExecutionCompleted"] = "ExecutionCompleted"
    output: Any = None


class ExecutionFailed(_Event):
    """Terminal: the flow raised."""

    type: Literal["ExecutionFailed"] = "ExecutionFailed"
    error: ErrorInfo


class ChildStarted(_Event):
    """The flow started a child flow at ``step_id``: the execution ``child_id`` (derived
    from this execution's id and the step, so a replay never starts a second one). Its end
    comes back as a resume on ``loom.child`` keyed by ``child_id``. ``on_cancel`` says what
    this execution's end does to a child still running: ``cancel`` it or ``abandon`` it."""

    type: Literal["ChildStarted"] = "ChildStarted"
    step_id: str
    child_id: str
    flow: str
    on_cancel: Literal["cancel", "abandon"] = "cancel"
    explicit_id: bool = False  # the flow chose the child's id (``start_flow(execution_id=…)``)


class ChildCancelRequested(_Event):
    """The flow asked its child ``child_id`` to stop, through the child's handle, at
    ``step_id`` (``await child.cancel()``). The request itself is the child's
    ``CancelRequested``; its end comes back as the child's end always does."""

    type: Literal["ChildCancelRequested"] = "ChildCancelRequested"
    step_id: str
    child_id: str
    reason: str = ""


class ChildShared(_Event):
    """In a child's log: ``execution_id``, a fork of this child's parent, reused the start
    of this child (its log holds the parent's ``ChildStarted``); the child's end is told to
    it as to the parent (see :mod:`loom.ops.fork`)."""

    type: Literal["ChildShared"] = "ChildShared"
    execution_id: str


class CancelRequested(_Event):
    """Someone asked the execution to stop (``by``), or its ``deadline`` passed (``by`` is
    ``"loom.timeout"``). Not terminal: the flow sees ``asyncio.CancelledError`` at its next
    await the log cannot serve, and its ``except``/``finally`` blocks may run effects until
    ``cleanup_s`` seconds after this event's ``at`` (see :mod:`loom.kernel.cancellation`)."""

    type: Literal["CancelRequested"] = "CancelRequested"
    reason: str = ""
    by: str | None = None
    cleanup_s: float = 300.0


class CancelDelivered(_Event):
    """The flow was handed its ``CancelledError``. A replay hands it over at ``place`` among
    the step outcomes (the request's seq when the flow met it while replaying, else this
    event's own), so the flow sees exactly the outcomes it saw live before it."""

    type: Literal["CancelDelivered"] = "CancelDelivered"
    place: int | None = None


class ExecutionCancelled(_Event):
    """Terminal: cancelled by a caller."""

    type: Literal["ExecutionCancelled"] = "ExecutionCancelled"
    reason: str = ""
    by: str | None = None


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
