"""Delivering a message, the receiver's side of :mod:`loom.primitives.messages`: the append
to its mailbox (once per message id), the wake of the receiver, and ``Runtime.send``.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import ExecutionSupersededError, LoomError, StoreError
from loom.ids import check_execution_id
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.defs import to_json_value
from loom.kernel.execution_limits import check_room
from loom.kernel.fold import ExecutionState
from loom.kernel.inbox import contended_attempts, message_item, post
from loom.kernel.payloads import dump_exact
from loom.primitives.mailbox import check_message_id, check_topic, new_message, place
from loom.primitives.message_repeats import check_same_message
from loom.reserved_ids import check_outside_message_id
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

__all__ = ["deliver", "send_from_outside", "wake", "wake_quietly"]

log = logging.getLogger("loom")


async def deliver(
    rt: Runtime,
    execution_id: str,
    topic: str,
    payload: Any,
    *,
    message_id: str,
    sender: str | None = None,
    by: str | None = None,
) -> tuple[ExecutionState, bool]:
    """Append a message to ``execution_id``'s mailbox unless ``message_id`` is there already.

    Returns:
        The receiver's state after it, and whether this call delivered it (``False``: a
        duplicate, dropped).

    Raises:
        UnknownExecutionError: No such execution.
        ExecutionFinishedError: The execution ended (and never had this message).
        InvalidPayloadError: ``payload`` is not exact JSON.
        MessageConflictError: ``message_id`` came before with another topic or payload
            (:mod:`loom.primitives.message_repeats`); nothing is written.
    """
    check_topic(topic)
    eid = check_execution_id(execution_id)
    await rt.require(eid)
    value = to_json_value(payload)
    raw = dump_exact(value, "message payload")  # refused before anything is read or written
    state = await rt.load_state(eid)
    if not new_message(state, message_id, topic):
        await check_same_message(rt, state, message_id, topic, value)
        return state, False
    check_room(rt, state, topic)  # (loom.kernel.execution_limits): refused, nothing written
    stored, _ = await rt.payloads.encode(value, f"{eid}/message", raw)

    def decide(now: ExecutionState) -> Decision:
        # Decided again on every reload: the same message delivered twice at once lands
        # once, and none lands after the end or past the receiver's limits.
        if not new_message(now, message_id, topic):
            return NOTHING
        check_room(rt, now, topic)
        at = rt.clock()
        event = ev.MessageReceived(
            topic=topic, message_id=message_id, payload=stored, sender=sender, by=by
        )
        woke = place(now, topic, at)[2] and now.parked_reason is None
        change = StatusChange("running") if woke and now.status == "suspended" else None
        return Decision([event], change, at)

    try:
        state, wrote = await write(rt, state, decide, attempts=contended_attempts(rt))
    except ExecutionSupersededError:
        if rt.store.inbox() is None:
            raise
        # The receiver's log is hot (a fan-in): leave it in the inbox, drained with the
        # others (a repeat of the same id there is the same item).
        item = message_item(topic, message_id, stored, sender, by, rt.clock())
        await post(rt, eid, item, state.flow)
        return state, True
    if not wrote:  # the same id landed meanwhile: the same message, or a conflict
        await check_same_message(rt, state, message_id, topic, value)
    return state, wrote


async def wake(rt: Runtime, state: ExecutionState) -> ExecutionResult | None:
    """Dispatch the receiver if the message may have moved it (as a resume does)."""
    if state.status != "running":
        return None
    dispatch_id = f"{state.execution_id}:{state.last_seq}"
    return await rt._dispatch(state.execution_id, state.flow, "resume", dispatch_id)  # pyright: ignore[reportPrivateUsage]


async def wake_quietly(rt: Runtime, state: ExecutionState) -> None:
    """Wake the receiver of a flow's message; what its run raises is not the sender's
    failure (the message is delivered, and a sweep or the next message runs it again)."""
    try:
        await wake(rt, state)
    except StoreError:
        raise
    except LoomError as exc:
        log.warning("waking %s after a message failed: %s", state.execution_id, exc)


async def send_from_outside(
    rt: Runtime,
    execution_id: str,
    topic: str,
    payload: Any = None,
    *,
    message_id: str | None = None,
    by: str | None = None,
    derived_id: bool = False,
) -> ExecutionResult:
    """``Runtime.send``: deliver a message from outside any flow, then run the receiver.

    ``message_id`` makes a retried call a no-op (default: a fresh id, so every call is a new
    message); ``by`` is who sent it (recorded). ``derived_id`` is for the engine alone: the
    id is a signed request's default, of a form outside callers may not use.

    Raises:
        InputError: A topic or message id outside the id rule's alphabet.
        ReservedExecutionIdError: ``message_id`` has the form of a signed request's default.
        MailboxFullError: The receiving run holds ``max_messages`` messages (HTTP 429).
        LimitExceededError: The receiver's log holds ``max_events`` events.
    """
    if message_id is not None:
        check_message_id(message_id)
        if not derived_id:  # a signed message's default id is the engine's (loom.reserved_ids)
            check_outside_message_id(message_id)
    mid = message_id or f"msg:{uuid.uuid4()}"
    state, delivered = await deliver(rt, execution_id, topic, payload, message_id=mid, by=by)
    ran = await wake(rt, state) if delivered else None
    return ran or await rt.report(state, include_state=False)
