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

import logging
import uuid
import weakref
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, NoReturn

from loom import crash
from loom import events as ev
from loom.errors import (
    ConfigurationError,
    ExecutionFinishedError,
    ExecutionSupersededError,
    GateTimeoutError,
    InputError,
    InvalidExecutionIdError,
    InvalidPayloadError,
    LimitExceededError,
    LoomError,
    MailboxFullError,
    MessageConflictError,
    MessageTimeoutError,
    StoreError,
    UnknownExecutionError,
)
from loom.ids import check_execution_id, name_problem
from loom.kernel import cancellation
from loom.kernel.context import AbortSignal, FlowContext, next_step_id, off_scope
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.defs import to_json_value
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.kernel.execution_limits import check_room
from loom.kernel.fold import ExecutionState, GateRecord, resume_key
from loom.kernel.payloads import dump_exact
from loom.kernel.primitive import Primitive
from loom.primitives.message_repeats import RECV, check_same_message
from loom.reserved_ids import check_outside_message_id
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.wire import ExecutionResult

__all__ = ["RECV", "SEND", "deliver", "recv", "send", "send_from_outside"]

log = logging.getLogger("loom")


SEND: Final = "loom.send"
"""The step record of a ``ctx.send`` (what the log shows in place of an effect name)."""
MAX_TOPIC: Final = 256

# Errors a failed delivery records with the sender's step and raises again on replay.
_RECORDED: dict[str, type[LoomError]] = {
    c.code: c
    for c in (
        UnknownExecutionError,
        ExecutionFinishedError,
        InvalidExecutionIdError,
        InvalidPayloadError,
        MessageConflictError,
        LimitExceededError,
        MailboxFullError,
    )
}


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


def _place(s: ExecutionState, topic: str, at: float) -> tuple[int, list[int], bool]:
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


def _received(s: ExecutionState, e: ev.MessageReceived) -> None:
    if known(s, e.message_id):
        return  # a redelivered message is dropped
    n, late, woke = _place(s, e.topic, e.at)
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


def _sent(s: ExecutionState, e: ev.MessageSent) -> None:
    rec: dict[str, Any] = {"effect": SEND, "status": "completed", "seq": e.seq}
    if e.error is not None:
        rec.update(status="failed", error=e.error.model_dump())
    s.steps[e.step_id] = rec  # type: ignore[assignment]


# -- delivery (the receiver's side) ---------------------------------------------------------


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
    if not _new_message(state, message_id, topic):
        await check_same_message(rt, state, message_id, topic, value)
        return state, False
    check_room(rt, state, topic)  # (loom.kernel.execution_limits): refused, nothing written
    stored, _ = await rt.payloads.encode(value, f"{eid}/message", raw)

    def decide(now: ExecutionState) -> Decision:
        # Decided again on every reload: the same message delivered twice at once lands
        # once, and none lands after the end or past the receiver's limits.
        if not _new_message(now, message_id, topic):
            return NOTHING
        check_room(rt, now, topic)
        at = rt.clock()
        event = ev.MessageReceived(
            topic=topic, message_id=message_id, payload=stored, sender=sender, by=by
        )
        woke = _place(now, topic, at)[2] and now.parked_reason is None
        change = StatusChange("running") if woke and now.status == "suspended" else None
        return Decision([event], change, at)

    state, wrote = await write(rt, state, decide)
    if not wrote:  # the same id landed meanwhile: the same message, or a conflict
        await check_same_message(rt, state, message_id, topic, value)
    return state, wrote


def _new_message(state: ExecutionState, message_id: str, topic: str) -> bool:
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


async def _wake(rt: Runtime, state: ExecutionState) -> ExecutionResult | None:
    """Dispatch the receiver if the message may have moved it (as a resume does)."""
    if state.status != "running":
        return None
    dispatch_id = f"{state.execution_id}:{state.last_seq}"
    return await rt._dispatch(state.execution_id, state.flow, "resume", dispatch_id)  # pyright: ignore[reportPrivateUsage]


async def _wake_quietly(rt: Runtime, state: ExecutionState) -> None:
    """Wake the receiver of a flow's message; what its run raises is not the sender's
    failure (the message is delivered, and a sweep or the next message runs it again)."""
    try:
        await _wake(rt, state)
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
    ran = await _wake(rt, state) if delivered else None
    return ran or await rt.report(state, include_state=False)


# -- the flow's side ------------------------------------------------------------------------


_COUNTS: weakref.WeakKeyDictionary[Session, dict[str, int]] = weakref.WeakKeyDictionary()


async def recv(session: Session, step_id: str, topic: str, timeout: float | None) -> Any:
    """The session side of ``ctx.recv``: wait on the topic's next slot (module docstring).

    Raises:
        MessageTimeoutError: ``timeout`` passed before a message came.
    """
    check_topic(topic)
    counts = _COUNTS.setdefault(session, {})
    n = counts[topic] = counts.get(topic, 0) + 1
    try:
        return await session.gate(step_id, RECV, slot_key(topic, n), timeout)
    except GateTimeoutError:
        raise MessageTimeoutError(
            f"no message on {topic!r} within the timeout", details={"step_id": step_id}
        ) from None


async def send(session: Session, step_id: str, to: str, topic: str, payload: Any) -> None:
    """The session side of ``ctx.send``: deliver once, record, serve the record on replay."""
    if session.signal is not None:
        raise session.signal
    check_topic(topic)
    rec = session.state.steps.get(step_id)
    if rec is None:
        session._check_unused(step_id, f"send(to={to!r}, topic={topic!r})")  # pyright: ignore[reportPrivateUsage]
        await force(session)  # the receiver must not see steps the log may yet lose
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        if dry(session):  # a replay check must not deliver anything
            _diverged(session, step_id, "replay reached send(), not in the history")
        with off_scope():
            crash.point("before_send", step_id)
            error = await _deliver_live(session, step_id, to, topic, payload)
            crash.point("after_send", step_id)  # delivered, not yet recorded: replay resends
            sent = ev.MessageSent(
                step_id=step_id, to=to, topic=topic, message_id=_id(session, step_id), error=error
            )
            await session.append([sent])
            crash.point("after_sent", step_id)
        rec = session.state.steps[step_id]
    elif rec.get("effect") != SEND:
        _diverged(session, step_id, f"log has effect {rec.get('effect')!r}, flow called send()")
    visit(session, step_id)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]
    if rec.get("status") == "failed":
        info = rec.get("error") or {}
        kind = _RECORDED.get(info.get("code", ""), LoomError)
        raise kind(info.get("message", "message not delivered"), details={"step_id": step_id})


def _diverged(session: Session, step_id: str, what: str) -> NoReturn:
    session._park(step_id, f"step {step_id}: {what}")  # pyright: ignore[reportPrivateUsage]


def dry(session: Session) -> bool:
    """Whether ``session`` is a replay that writes nothing (the test toolkit, the replay
    check): what it would do live must not reach other executions."""
    from loom.kernel.journal import DryJournal

    return isinstance(session.journal, DryJournal)


def _id(session: Session, step_id: str) -> str:
    return session.state.step_key(step_id)


async def _deliver_live(
    session: Session, step_id: str, to: str, topic: str, payload: Any
) -> ev.ErrorInfo | None:
    """Deliver from inside the flow; an undeliverable message is the flow's error to
    record, a store failure is the call's (it unwinds and the delivery is retried)."""
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]  # the flow is not blocked
    try:
        state, delivered = await deliver(
            session.rt,
            to,
            topic,
            payload,
            message_id=_id(session, step_id),
            sender=session.execution_id,
        )
        if delivered and state.execution_id != session.execution_id:
            await _wake_quietly(session.rt, state)
    except tuple(_RECORDED.values()) as exc:
        return _recorded(session, step_id, to, exc)
    except (StoreError, ConfigurationError, ExecutionSupersededError) as exc:
        session._raise(AbortSignal(exc))  # pyright: ignore[reportPrivateUsage]
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
        session._poke()  # pyright: ignore[reportPrivateUsage]
    return None


def _recorded(session: Session, step_id: str, to: str, exc: LoomError) -> ev.ErrorInfo:
    """What the sender's step records of an undeliverable message (raised on replay)."""
    message = exc.message
    if isinstance(exc, MessageConflictError):  # the flow cannot pick another id: say why
        message = (
            f"send at step {step_id}: {to!r} already holds another message under this "
            f"step's id {_id(session, step_id)!r} (sent from outside under it, or by code "
            "that sent another payload here before)"
        )
    return ev.ErrorInfo(code=exc.code, type=type(exc).__name__, message=message)


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


PRIMITIVE = Primitive(
    "messages",
    head={"MessageReceived": _received},
    step={"MessageSent": _sent},
    context=MessagesContext,
    own_gates=(RECV,),
)
