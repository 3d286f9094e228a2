"""The events of an execution's life: its start, claims and dequeue, gates suspending and
resuming it, an operator parking, retrying or forking it, continue-as-new, cancellation,
and its end.

Private: import these from :mod:`loom.events`, which builds the ``Event`` union of them
all and sets each class's ``__module__`` to ``loom.events``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from loom._events.base import ErrorInfo, EventBase, ForkOrigin


class ExecutionStarted(EventBase):
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


class ExecutionClaimed(EventBase):
    """A worker took ownership for one ``execute`` call, until ``until`` (epoch seconds)."""

    type: Literal["ExecutionClaimed"] = "ExecutionClaimed"
    holder: str
    until: float


class ExecutionDequeued(EventBase):
    """A queued execution was first admitted by its queue (recorded with that claim):
    its ``deadline``, if the start gave a timeout from dequeue (loom.primitives.queue_options)."""

    type: Literal["ExecutionDequeued"] = "ExecutionDequeued"
    deadline: float | None = None


class ExecutionSuspended(EventBase):
    """A gate or timer opened; the execution waits for ``on`` + ``correlation_key``."""

    type: Literal["ExecutionSuspended"] = "ExecutionSuspended"
    step_id: str
    on: str
    correlation_key: str
    wake_at: float | None = None


class ExecutionResumed(EventBase):
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


class ExecutionParked(EventBase):
    """The execution stopped for an operator: replay diverged from the log (see ADR 0003)."""

    type: Literal["ExecutionParked"] = "ExecutionParked"
    reason: str
    step_id: str | None = None


class ExecutionRetried(EventBase):
    """An operator let a parked execution (poison or nondeterminism) run again."""

    type: Literal["ExecutionRetried"] = "ExecutionRetried"
    by: str = "operator"


class ExecutionForked(EventBase):
    """A fork's copy of its origin's prefix is complete (the ``copied`` events before it)."""

    type: Literal["ExecutionForked"] = "ExecutionForked"
    copied: int


class ExecutionContinued(EventBase):
    """The run ended by ``ctx.continue_as_new``: run ``run`` of the same execution starts
    here with ``input`` and a fresh history (see :mod:`loom.primitives.continuation`).

    ``consumed`` is how many ``ctx.recv`` calls the ended run made per topic: messages past
    them were not taken and are carried into the new run, in order.
    """

    type: Literal["ExecutionContinued"] = "ExecutionContinued"
    run: int
    input: Any = None
    consumed: dict[str, int] = Field(default_factory=dict[str, int])


class ExecutionCompleted(EventBase):
    """Terminal: the flow returned ``output``."""

    type: Literal["ExecutionCompleted"] = "ExecutionCompleted"
    output: Any = None


class ExecutionFailed(EventBase):
    """Terminal: the flow raised."""

    type: Literal["ExecutionFailed"] = "ExecutionFailed"
    error: ErrorInfo


class CancelRequested(EventBase):
    """Someone asked the execution to stop (``by``), or its ``deadline`` passed (``by`` is
    ``"loom.timeout"``). Not terminal: the flow sees ``asyncio.CancelledError`` at its next
    await the log cannot serve, and its ``except``/``finally`` blocks may run effects until
    ``cleanup_s`` seconds after this event's ``at`` (see :mod:`loom.kernel.cancellation`)."""

    type: Literal["CancelRequested"] = "CancelRequested"
    reason: str = ""
    by: str | None = None
    cleanup_s: float = 300.0


class CancelDelivered(EventBase):
    """The flow was handed its ``CancelledError``. A replay hands it over at ``place`` among
    the step outcomes (the request's seq when the flow met it while replaying, else this
    event's own), so the flow sees exactly the outcomes it saw live before it."""

    type: Literal["CancelDelivered"] = "CancelDelivered"
    place: int | None = None


class ExecutionCancelled(EventBase):
    """Terminal: cancelled by a caller."""

    type: Literal["ExecutionCancelled"] = "ExecutionCancelled"
    reason: str = ""
    by: str | None = None
