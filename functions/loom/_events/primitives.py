"""The events of the flow primitives: messages, published values and reads of them,
updates, streams and child flows.

Private: import these from :mod:`loom.events`, which builds the ``Event`` union of them
all and sets each class's ``__module__`` to ``loom.events``.
"""

from __future__ import annotations

from typing import Any, Literal

from loom._events.base import ErrorInfo, EventBase


class MessageReceived(EventBase):
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


class MessageSent(EventBase):
    """The flow's ``ctx.send`` at ``step_id`` delivered (or failed to deliver, ``error``)."""

    type: Literal["MessageSent"] = "MessageSent"
    step_id: str
    to: str
    topic: str
    message_id: str
    error: ErrorInfo | None = None


class EventPublished(EventBase):
    """The flow's ``ctx.set_event`` at ``step_id`` published ``value`` under ``key``."""

    type: Literal["EventPublished"] = "EventPublished"
    step_id: str
    key: str
    value: Any = None


class UpdateAccepted(EventBase):
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


class UpdateCompleted(EventBase):
    """The handler of update ``update_id`` returned ``output`` (or raised: ``error``); what
    every caller asking for that update is answered."""

    type: Literal["UpdateCompleted"] = "UpdateCompleted"
    update_id: str
    output: Any = None
    error: ErrorInfo | None = None


class EventAwaited(EventBase):
    """The flow's ``ctx.get_event`` at ``step_id`` found nothing under ``key`` of
    ``execution_id`` and waits until ``deadline`` (epoch seconds): recorded before it waits,
    so a worker that dies meanwhile leaves its successor the time that is left."""

    type: Literal["EventAwaited"] = "EventAwaited"
    step_id: str
    execution_id: str
    key: str
    deadline: float


class EventRead(EventBase):
    """The flow's ``ctx.get_event`` at ``step_id`` read ``value`` published under ``key`` by
    ``execution_id`` (``found`` false: nothing came in time); every replay is served this."""

    type: Literal["EventRead"] = "EventRead"
    step_id: str
    execution_id: str
    key: str
    found: bool = True
    value: Any = None


class StreamWritten(EventBase):
    """The flow's ``ctx.write_stream`` at ``step_id`` added ``value`` to the stream ``key``
    (its values are numbered from 0 in log order; see :mod:`loom.primitives.streams`)."""

    type: Literal["StreamWritten"] = "StreamWritten"
    step_id: str
    key: str
    value: Any = None


class StreamClosed(EventBase):
    """The flow's ``ctx.close_stream`` at ``step_id`` closed the stream ``key``: its readers
    have every value it will hold."""

    type: Literal["StreamClosed"] = "StreamClosed"
    step_id: str
    key: str


class ChildStarted(EventBase):
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


class ChildCancelRequested(EventBase):
    """The flow asked its child ``child_id`` to stop, through the child's handle, at
    ``step_id`` (``await child.cancel()``). The request itself is the child's
    ``CancelRequested``; its end comes back as the child's end always does."""

    type: Literal["ChildCancelRequested"] = "ChildCancelRequested"
    step_id: str
    child_id: str
    reason: str = ""


class ChildShared(EventBase):
    """In a child's log: ``execution_id``, a fork of this child's parent, reused the start
    of this child (its log holds the parent's ``ChildStarted``); the child's end is told to
    it as to the parent (see :mod:`loom.ops.fork`)."""

    type: Literal["ChildShared"] = "ChildShared"
    execution_id: str
