"""Messages between executions: ``ctx.send``, ``ctx.recv`` and ``Runtime.send``.

A message goes to an execution's *mailbox* on a *topic*. Several messages on one topic are
several messages (a mailbox, not a duplicate): ``ctx.recv(topic)`` takes them one at a
time, in arrival order. Gates (``ctx.suspend``) keep their correlation-key semantics.

How it maps onto the log:

* Delivery appends :class:`~loom.events.MessageReceived` to the receiver's log. Each topic
  has numbered *slots*; a message fills the lowest slot nobody filled yet. The ``n``-th
  ``ctx.recv`` on a topic (counted in the order the flow calls it, the same live and on
  replay) waits on the gate ``loom.recv`` / ``"{topic}#{n}"`` and is served the slot's
  message as a resume. So a message that comes before its ``recv`` is buffered, a ``recv``
  that comes first suspends and is woken through the normal dispatch path, and a replay
  hands every ``recv`` the message it had: its place in the log order is the message's seq.
* A ``recv`` whose timeout passed fills its slot as timed out (the runtime's own resume when
  the deadline is due, or the fold when a message arrives after the recorded deadline), and
  the message goes to the next slot: nothing is lost to a timed-out receiver.
* ``message_id`` deduplicates: a repeat with the same topic and payload (exact JSON) is
  dropped; one with another topic or payload is refused with
  :class:`~loom.errors.MessageConflictError` (see :mod:`loom.primitives.message_repeats`).
  ``ctx.send`` at step ``s`` of execution ``e`` sends with id ``"e:s"`` (its step key:
  ``"e#run2:s"`` in a second run) and records :class:`~loom.events.MessageSent` in the
  sender's log after the delivery: a crash in between replays the send, and the receiver
  drops the second copy (a replay that sends another payload fails the step with the
  conflict, recorded). Callers from outside may pass their own id for the same guarantee.

A message to an unknown execution raises :class:`~loom.errors.UnknownExecutionError`; to a
finished one, :class:`~loom.errors.ExecutionFinishedError` (from a flow: recorded with the
step and raised on every replay).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from loom import events as ev
from loom.kernel.context import FlowContext, next_step_id
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive
from loom.primitives.mailbox import (
    MAX_MESSAGE_ID,
    MAX_TOPIC,
    SEND,
    check_message_id,
    check_topic,
    known,
    message_decision,
    received,
    sent,
    slot_key,
)
from loom.primitives.message_delivery import deliver, send_from_outside
from loom.primitives.message_repeats import RECV
from loom.primitives.message_steps import RECV_COUNTS, dry, recv, send

# The parts, each in its module: names and the fold (loom.primitives.mailbox), delivery
# (loom.primitives.message_delivery), the flow's steps (loom.primitives.message_steps).
__all__ = [
    "MAX_MESSAGE_ID",
    "MAX_TOPIC",
    "PRIMITIVE",
    "RECV",
    "SEND",
    "MessagesContext",
    "check_message_id",
    "check_topic",
    "deliver",
    "dry",
    "known",
    "message_decision",
    "recv",
    "send",
    "send_from_outside",
    "slot_key",
]

_COUNTS = RECV_COUNTS  # read by loom.primitives.continuation under this name


class MessagesContext(FlowContext):
    """The ``ctx`` methods of mailboxes."""

    __slots__ = ()

    async def send(self, execution_id: str, topic: str, payload: Any = None) -> None:
        """Send a message to ``execution_id``'s mailbox on ``topic``, exactly once (a step;
        see :mod:`loom.primitives.messages`).

        Raises:
            UnknownExecutionError: No such execution.
            ExecutionFinishedError: It already ended.
            MessageConflictError: The receiver already holds another message under this
                step's message id (someone else sent one under it).
        """
        await send(self._session, next_step_id(self), execution_id, topic, payload)

    async def recv(self, topic: str, timeout: timedelta | float | None = None) -> Any:
        """Take the next message on ``topic`` (arrival order), waiting for one if none is
        buffered (see :mod:`loom.primitives.messages`).

        Raises:
            MessageTimeoutError: ``timeout`` passed first.
        """
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        return await recv(self._session, next_step_id(self), topic, seconds)


def _inbox_message(
    state: ExecutionState, body: dict[str, Any], now: float
) -> tuple[ev.MessageReceived, bool] | None:
    """A message posted to an inbox (``loom.kernel.inbox``), decided when it is drained."""
    return message_decision(
        state,
        body["topic"],
        body["message_id"],
        body.get("payload"),
        body.get("sender"),
        body.get("by"),
        now,
    )


PRIMITIVE = Primitive(
    "messages",
    head={"MessageReceived": received},
    step={"MessageSent": sent},
    context=MessagesContext,
    own_gates=(RECV,),
    inbox={"message": _inbox_message},
)
