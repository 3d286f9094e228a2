"""A message id that comes again: the same message (a no-op) or another one (refused).

A ``message_id`` names one message. A repeat with the same topic and the same payload is a
retry (a client's, Pub/Sub's, a replayed ``ctx.send``) and is dropped as a duplicate; a
repeat with another topic or payload is another message under a used id, and is refused
with :class:`~loom.errors.MessageConflictError` instead of being lost in silence, as a
start with a used execution id and another input is refused.

Payloads are compared as exact JSON, the way Loom records them: ``1``, ``1.0`` and ``true``
are three payloads (Python calls them equal, JSON does not), while the order of an object's
keys does not matter (JSON objects are unordered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import MessageConflictError
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.payloads import canonical_json

RECV: Final = "loom.recv"
"""The gate of a mailbox slot (``loom.primitives.messages``, which imports this module)."""

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

__all__ = ["check_same_message"]


async def check_same_message(
    rt: Runtime, state: ExecutionState, message_id: str, topic: str, value: Any
) -> None:
    """Refuse ``(topic, value)`` unless it is what ``message_id`` delivered before.

    Args:
        rt: The runtime (its payload codec reads a claim-checked payload back).
        state: The receiver's state, which holds ``message_id``.
        message_id: The repeated id.
        topic: The topic of the repeat.
        value: The JSON payload of the repeat.

    Raises:
        MessageConflictError: The first delivery had another topic or payload.
    """
    eid = state.execution_id
    first_topic, stored = await _first(rt, state, message_id)
    same = first_topic == topic
    if same:
        first = await rt.payloads.decode(stored, eid)
        same = canonical_json(first) == canonical_json(value)
    if not same:
        raise MessageConflictError(
            f"message {message_id!r} was already delivered to execution {eid!r} with "
            "another topic or payload; use a new message id",
            details={"execution_id": eid, "message_id": message_id, "topic": first_topic},
        )


async def _first(rt: Runtime, state: ExecutionState, message_id: str) -> tuple[str, Any]:
    """``(topic, stored payload)`` the id delivered: from the state while its slot is
    there, else from the log (a message of an earlier run keeps its id and loses its slot
    when the execution continues as new)."""
    slot = state.message_ids.get(message_id, "")  # (none: an earlier run's, in the log)
    got = state.resumes.get(resume_key(RECV, slot)) if slot else None
    if got is not None:
        return slot.rpartition("#")[0], got["payload"]
    for event in await rt.history(state.execution_id):
        if isinstance(event, ev.MessageReceived) and event.message_id == message_id:
            return event.topic, event.payload
    return "", None  # (never: the fold took the id from such an event)
