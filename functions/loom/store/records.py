"""The values the ``EventStore`` SPI (:mod:`loom.store.base`) takes and gives: statuses,
append requests and their status changes, loaded logs and snapshots, execution summaries and
their listing cursors, purge reports, and the checks every backend makes of an append
(numbering, nothing after a terminal event, the status an ending batch leaves).

Importable from :mod:`loom.store.base` too, where they were first defined.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from loom.events import TERMINAL_TYPES, Event

STATUSES = ("running", "suspended", "in_doubt", "completed", "failed", "cancelled")
LIVE_STATUSES = ("running", "suspended", "in_doubt")  # not finished: may still run code
FINISHED = frozenset({"completed", "failed", "cancelled"})
# The status a terminal event leaves an execution in.
ENDING_STATUS = {
    "ExecutionCompleted": "completed",
    "ExecutionFailed": "failed",
    "ExecutionCancelled": "cancelled",
}

ListCursor = tuple[float, str]
"""Where a listing resumes: ``(created_at, execution_id)`` of the last row seen."""


@dataclass(frozen=True, slots=True)
class StatusChange:
    """Summary fields an append updates, when the execution's status changes.

    Attributes:
        status: One of :data:`STATUSES`.
        wake_at: When a timer or gate timeout falls due (epoch seconds), if any.
        parked_reason: Why the execution stopped for an operator, if it did.
    """

    status: str
    wake_at: float | None = None
    parked_reason: str | None = None


@dataclass(frozen=True, slots=True, init=False)
class AppendRequest:
    """One append: events numbered from ``expected_seq + 1``, all or nothing.

    Attributes:
        execution_id: The execution whose log grows.
        expected_seq: The seq the log must end at for the append to succeed.
        events: The events, numbered consecutively after ``expected_seq``.
        status: A summary change written atomically with the events, if any.
        snapshot: The folded state after the events (serialized), for a store that keeps
            snapshots with appends (``EventStore.keeps_append_snapshots``).
        fence: This append may race with a live holder's session (a control event, a
            message, a takeover claim): not the holder's own. A store that writes a
            holder's last append in a way other appends cannot collide with (Firestore's
            end on the execution document) makes fenced appends collide with it; the
            others ignore the flag.
    """

    execution_id: str
    expected_seq: int
    events: Sequence[Event]
    status: StatusChange | None = None
    snapshot: str | None = None
    fence: bool = False

    def __init__(
        self,
        execution_id: str,
        expected_seq: int,
        events: Sequence[Event],
        status: StatusChange | None = None,
        snapshot: str | None = None,
        fence: bool = False,
    ) -> None:
        # The generated frozen ``__init__`` looks up ``object.__setattr__`` for every field;
        # the slots' own setters cost 40 % fewer instructions, paid on every append.
        _set_execution_id(self, execution_id)
        _set_expected_seq(self, expected_seq)
        _set_events(self, events)
        _set_status(self, status)
        _set_snapshot(self, snapshot)
        _set_fence(self, fence)


def _slot_setter(cls: type, name: str) -> Callable[[object, object], None]:
    """The setter of slot ``name`` of ``cls``, which a frozen class's ``__setattr__`` refuses."""
    return cls.__dict__[name].__set__


_set_execution_id = _slot_setter(AppendRequest, "execution_id")
_set_expected_seq = _slot_setter(AppendRequest, "expected_seq")
_set_events = _slot_setter(AppendRequest, "events")
_set_status = _slot_setter(AppendRequest, "status")
_set_snapshot = _slot_setter(AppendRequest, "snapshot")
_set_fence = _slot_setter(AppendRequest, "fence")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A folded state at ``seq``, serialized by the runtime (the store does not read it)."""

    seq: int
    state: str


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What ``load`` returns: the newest snapshot, and the events after it."""

    snapshot: Snapshot | None
    events: list[Event] = field(default_factory=list[Event])

    @property
    def last_seq(self) -> int:
        """The seq the log ends at."""
        if self.events:
            return self.events[-1].seq
        return self.snapshot.seq if self.snapshot else 0


@dataclass(frozen=True, slots=True)
class ExecutionSummary:
    """One row of ``list``: what an operator or a sweeper needs without reading events."""

    execution_id: str
    flow: str
    status: str
    last_seq: int
    created_at: float
    updated_at: float
    wake_at: float | None = None
    parked_reason: str | None = None
    flow_version: str = "1"

    @property
    def cursor(self) -> ListCursor:
        """Pass as ``list(after=...)`` to continue after this row."""
        return (self.created_at, self.execution_id)


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What one :meth:`EventStore.purge` call did.

    Attributes:
        purged: Ids of the executions deleted, oldest first.
        scanned: Executions looked at.
        cursor: Pass as ``after`` to the next call to continue; ``None`` when every
            execution old enough to qualify has been looked at.
    """

    purged: list[str]
    scanned: int
    cursor: ListCursor | None


OnDelete = Callable[[str], Awaitable[None]]


def page_after(
    rows: Sequence[ExecutionSummary], after: ListCursor | None, oldest_first: bool, limit: int
) -> list[ExecutionSummary]:
    """Order rows by ``(created_at, execution_id)`` and keep ``limit`` of them after ``after``
    (for backends that filter in memory)."""
    ordered = sorted(rows, key=lambda r: r.cursor, reverse=not oldest_first)
    if after is not None:
        ordered = [r for r in ordered if (r.cursor > after if oldest_first else r.cursor < after)]
    return ordered[:limit]


def check_then(execution_id: str, then: Sequence[Event]) -> None:
    """Refuse events to write with a create that are not numbered ``2, 3, …`` (a caller bug)."""
    check_numbering(AppendRequest(execution_id, 1, then))


def check_numbering(request: AppendRequest) -> None:
    """Refuse a batch whose events are not numbered ``expected_seq + 1, …``, or that has
    events after a terminal one (caller bugs)."""
    seq = request.expected_seq
    last = seq + len(request.events)
    for event in request.events:
        seq += 1
        if event.seq != seq:
            raise ValueError(
                f"event {event.type} has seq {event.seq}, expected "
                f"{seq} in append to {request.execution_id!r}"
            )
        if seq != last and event.type in TERMINAL_TYPES:
            raise ValueError(
                f"event {event.type} at {seq} ends the log of {request.execution_id!r}: "
                f"nothing may follow it in the same batch"
            )


def settled_status(events: Sequence[Event], status: StatusChange | None) -> StatusChange | None:
    """The status an append of ``events`` writes: ``status``, unless the batch ends with a
    terminal event and ``status`` is not a finished one; then the event's own.

    So a log that ends is always summarised as finished, which the stores' checks of "no
    event after a terminal one" rely on (SQLite reads the last event only for a finished
    row; Firestore keeps the end on the execution document, which only status changes write).
    """
    if not events:
        return status
    ending = ENDING_STATUS.get(events[-1].type)
    if ending is None or (status is not None and status.status in FINISHED):
        return status
    return StatusChange(ending)
