"""A mailbox as a loaded state holds it (:mod:`loom.primitives.messages`): the names of its
topics, slots and message ids, the fold of its events, and what a new message decides.

Everything here is a pure function of an :class:`~loom.kernel.fold.ExecutionState`, so the
fold, a delivery and an inbox's drain place a message alike.
"""

from __future__ import annotations

from typing import Any, Final

from loom import events as ev
from loom.errors import ExecutionFinishedError, InputError
from loom.ids import name_problem
from loom.kernel.fold import ExecutionState, GateRecord, resume_key
from loom.primitives.message_repeats import RECV

__all__ = [
    "MAX_MESSAGE_ID",
    "MAX_TOPIC",
    "SEND",
    "check_message_id",
    "check_topic",
    "known",
    "message_decision",
    "new_message",
    "place",
    "received",
    "sent",
    "slot_key",
]

SEND: Final = "loom.send"
"""The step record of a ``ctx.send`` (what the log shows in place of an effect name)."""
MAX_TOPIC: Final = 256


def slot_key(topic: str, n: int) -> str:
    """The correlation key of slot ``n`` (1-based) of ``topic``."""
    return f"{topic}#{n}"


MAX_MESSAGE_ID: Final = 512


def check_topic(topic: object) -> str:
    """``topic`` if it is a usable topic name, else an :class:`InputError` naming why
    (the id rule's alphabet: :func:`loom.ids.name_problem`)."""
    problem = name_problem(topic, max_bytes=MAX_TOPIC)
    if problem is not None:
        raise InputError(
            f"a message topic {problem}; got {repr(topic)[:100]}",
            details={"topic": repr(topic)[:300], "problem": problem},
            code="invalid_topic",
        )
    return topic  # type: ignore[return-value]


def check_message_id(message_id: object) -> str:
    """``message_id`` if it is a usable message id, else an :class:`InputError` (the id
    rule's alphabet: :func:`loom.ids.name_problem`)."""
    problem = name_problem(message_id, max_bytes=MAX_MESSAGE_ID)
    if problem is not None:
        raise InputError(
            f"a message id {problem}; got {repr(message_id)[:100]}",
            details={"message_id": repr(message_id)[:300], "problem": problem},
            code="invalid_message_id",
        )
    return message_id  # type: ignore[return-value]


# -- the fold -----------------------------------------------------------------------------


def _gate_of(s: ExecutionState, slot: str) -> GateRecord | None:
    for gate in s.gates.values():
        if gate["on"] == RECV and gate["correlation_key"] == slot:
            return gate
    return None


def place(s: ExecutionState, topic: str, at: float) -> tuple[int, list[int], bool]:
    """Where a message arriving at ``at`` goes: its slot, the slots it finds past their
    recorded deadline (they time out), and whether it meets an opened ``recv`` gate."""
    n, late, woke = s.mailbox.get(topic, 0), list[int](), False
    while True:
        n += 1
        key = resume_key(RECV, slot_key(topic, n))
        if key in s.resumes:
            continue  # a recv that timed out filled this slot
        gate = _gate_of(s, slot_key(topic, n))
        woke = woke or gate is not None
        if gate is not None and gate["wake_at"] is not None and at >= gate["wake_at"]:
            late.append(n)  # decided by recorded times, so every fold agrees
            continue
        return n, late, woke


def known(s: ExecutionState, message_id: str) -> bool:
    """Whether ``message_id`` reached the execution before (this run, or an earlier one not
    long ago: ``loom.primitives.continuation``): a repeat, never delivered twice."""
    return message_id in s.message_ids or message_id in s.message_ids_kept


def received(s: ExecutionState, e: ev.MessageReceived) -> None:
    """Fold a :class:`~loom.events.MessageReceived` into its slot (a repeat is dropped)."""
    if known(s, e.message_id):
        return  # a redelivered message is dropped
    n, late, woke = place(s, e.topic, e.at)
    for slot in late:
        key = resume_key(RECV, slot_key(e.topic, slot))
        s.resumes[key] = {"payload": None, "timed_out": True, "seq": e.seq}
    s.resumes[resume_key(RECV, slot_key(e.topic, n))] = {
        "payload": e.payload,
        "timed_out": False,
        "seq": e.seq,
    }
    s.mailbox[e.topic] = n
    s.message_ids[e.message_id] = slot_key(e.topic, n)
    if woke and s.status == "suspended" and s.parked_reason is None:
        s.status = "running"


def sent(s: ExecutionState, e: ev.MessageSent) -> None:
    """Fold a :class:`~loom.events.MessageSent` into the sender's step record."""
    rec: dict[str, Any] = {"effect": SEND, "status": "completed", "seq": e.seq}
    if e.error is not None:
        rec.update(status="failed", error=e.error.model_dump())
    s.steps[e.step_id] = rec  # type: ignore[assignment]


# -- what a new message decides -------------------------------------------------------------


def message_decision(
    state: ExecutionState,
    topic: str,
    message_id: str,
    stored: Any,
    sender: str | None,
    by: str | None,
    now: float,
) -> tuple[ev.MessageReceived, bool] | None:
    """A message decided on ``state`` (an inbox's, :mod:`loom.kernel.inbox`): its event and
    whether it meets an opened ``recv`` gate; ``None`` when ``state`` holds it already.

    Raises:
        ExecutionFinishedError: The execution ended.
    """
    if not new_message(state, message_id, topic):
        return None
    event = ev.MessageReceived(
        topic=topic, message_id=message_id, payload=stored, sender=sender, by=by
    )
    return event, place(state, topic, now)[2] and state.parked_reason is None


def new_message(state: ExecutionState, message_id: str, topic: str) -> bool:
    """Whether ``message_id`` is new to ``state`` (else a repeat: dropped, if the same);
    refused if the execution ended.

    Raises:
        ExecutionFinishedError: The execution ended (and never had this message).
    """
    if known(state, message_id):
        return False
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {state.execution_id!r} is {state.status}; message on {topic!r} refused",
            details={"execution_id": state.execution_id, "status": state.status, "topic": topic},
        )
    return True
