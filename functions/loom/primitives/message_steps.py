"""The flow's side of :mod:`loom.primitives.messages`: ``ctx.send`` as a recorded step
(delivered once, its outcome served on replay) and ``ctx.recv`` as a wait on the topic's
next slot.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NoReturn

from loom import crash
from loom import events as ev
from loom.errors import (
    ConfigurationError,
    ExecutionFinishedError,
    ExecutionSupersededError,
    GateTimeoutError,
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
from loom.kernel import cancellation
from loom.kernel.context import AbortSignal, off_scope
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.primitives.mailbox import SEND, check_topic, slot_key
from loom.primitives.message_delivery import deliver, wake_quietly
from loom.primitives.message_repeats import RECV

if TYPE_CHECKING:
    from loom.kernel.session import Session

__all__ = ["RECV_COUNTS", "dry", "recv", "send"]

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

RECV_COUNTS: weakref.WeakKeyDictionary[Session, dict[str, int]] = weakref.WeakKeyDictionary()
"""How many ``recv`` each session called per topic (what a continuing run carries over:
:mod:`loom.primitives.continuation`)."""


async def recv(session: Session, step_id: str, topic: str, timeout: float | None) -> Any:
    """The session side of ``ctx.recv``: wait on the topic's next slot
    (:mod:`loom.primitives.messages`).

    Raises:
        MessageTimeoutError: ``timeout`` passed before a message came.
    """
    check_topic(topic)
    counts = RECV_COUNTS.setdefault(session, {})
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
            await wake_quietly(session.rt, state)
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
