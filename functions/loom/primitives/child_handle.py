"""A child flow's handle: what ``ctx.start_flow`` returns (:mod:`loom.primitives.children`).

The parent awaits the handle for the child's output, and acts on the child through it:

* ``await child.cancel(reason)`` asks the child to stop (its ``except``/``finally`` cleanup
  runs, :mod:`loom.kernel.cancellation`) and records :class:`~loom.events.ChildCancelRequested`
  at the step. The request is made first and recorded after, so a crash in between makes
  it again on the replay, where it changes nothing (a pending cancel stands); a child that
  already ended is left as it is. The parent sees the cancellation where it awaits the
  child: :class:`~loom.errors.ChildFlowFailedError` with status ``cancelled`` (or the
  child's output, if its cleanup swallowed the cancel and returned).
* ``await child.send(topic, payload)`` is ``ctx.send(child.execution_id, topic, payload)``:
  a message to the child's mailbox, delivered once (:mod:`loom.primitives.messages`).

Both are steps: each takes the next step id of the task that calls it, is recorded once,
and is served from the log on replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Final

from loom import crash
from loom import events as ev
from loom.errors import (
    ChildFlowFailedError,
    ConfigurationError,
    ContextMisuseError,
    ExecutionFinishedError,
    ExecutionSupersededError,
    StoreError,
    UnknownExecutionError,
)
from loom.kernel import cancellation
from loom.kernel.context import SCOPE, AbortSignal, off_scope
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.kernel.fold import ExecutionState
from loom.primitives import messages

if TYPE_CHECKING:
    from loom.kernel.defs import FlowDef
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session

__all__ = ["CANCEL", "CASCADE_BY", "CHILD_GATE", "HANDLE_BY", "ChildFlow", "cancel_child"]

log = logging.getLogger("loom")

CHILD_GATE: Final = "loom.child"
"""The gate a parent waits on for a child's end, keyed by the child's id."""
CANCEL: Final = "loom.child.cancel"
"""The step record of a cancel through a handle (in place of an effect name)."""
CASCADE_BY: Final = "loom.parent"
"""``by`` of the cancel a parent's end (or its own cancel) makes of a child still running."""
HANDLE_BY: Final = "loom.parent.handle"
"""``by`` of the cancel a parent's flow makes through the child's handle."""


class ChildFlow:
    """A child flow started by ``ctx.start_flow``: await it (or :meth:`result`) for its
    output; :meth:`cancel` and :meth:`send` act on it.

    Attributes:
        execution_id: The child execution's id.
        flow: The child's flow name.
    """

    def __init__(self, session: Session, step_id: str, cid: str, defn: FlowDef, on_cancel: str):
        self._session, self._step_id, self._defn = session, step_id, defn
        self._on_cancel = on_cancel
        self.execution_id, self.flow = cid, defn.name
        self._outcome: dict[str, Any] | None = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    async def result(self) -> Any:
        """The child's output (typed by its flow), once it ends.

        Raises:
            ChildFlowFailedError: The child failed or was cancelled.
        """
        if self._outcome is None:
            self._outcome = await self._wait()
        got = self._outcome
        if got.get("status") == "completed":
            return self._defn.typed.parse_output(got.get("output"))
        error: dict[str, Any] = got.get("error") or {}
        raise ChildFlowFailedError(
            f"child flow {self.flow!r} ({self.execution_id}) {got.get('status')}: "
            f"{error.get('message', '')}",
            child_id=self.execution_id,
            flow=self.flow,
            status=str(got.get("status")),
            error=error,
        )

    async def cancel(self, reason: str = "") -> None:
        """Ask the child to stop (a step): its cleanup runs, and awaiting this handle then
        raises :class:`~loom.errors.ChildFlowFailedError` with status ``cancelled``. A child
        that already ended is left as it is."""
        session = self._session
        step_id = _step_id(session)
        why = reason or f"cancelled by its parent {session.execution_id} at step {step_id}"
        await cancel_step(session, step_id, self.execution_id, why)

    async def send(self, topic: str, payload: Any = None) -> None:
        """Send the child a message on ``topic`` (a step; ``ctx.send`` to the child's id).

        Raises:
            ExecutionFinishedError: The child already ended.
        """
        session = self._session
        await messages.send(session, _step_id(session), self.execution_id, topic, payload)

    async def _wait(self) -> dict[str, Any]:
        session, cid = self._session, self.execution_id
        try:
            got = await session.gate(f"{self._step_id}/child", CHILD_GATE, cid, None)
        except asyncio.CancelledError:
            if self._on_cancel == "cancel" and cancellation.handed_over(session):
                reason = f"parent {session.execution_id} was cancelled"
                try:
                    await cancel_child(session.rt, cid, reason, CASCADE_BY)
                except StoreError as exc:  # the store's failure is not the flow's: the end's
                    # follow-up cancels the child again (loom.kernel.primitive follow-ups)
                    log.warning("cancelling child %s failed, retried at the end: %s", cid, exc)
            raise
        return got if isinstance(got, dict) else {"status": "failed"}  # pyright: ignore[reportUnknownVariableType]


def _step_id(session: Session) -> str:
    """The next step id of the calling task, which must be one of ``session``'s flow."""
    scope = SCOPE.get()
    if scope is None or scope.session is not session:
        raise ContextMisuseError(
            "a child flow's handle is used only inside the flow that started the child"
        )
    return scope.next_id()


async def cancel_child(rt: Runtime, cid: str, reason: str, by: str) -> None:
    """Request the cancel of child ``cid``; nothing if it already ended (or is gone)."""
    with off_scope(), contextlib.suppress(ExecutionFinishedError, UnknownExecutionError):
        await rt.cancel(cid, reason, by=by)


async def cancel_step(session: Session, step_id: str, cid: str, reason: str) -> None:
    """The session side of ``child.cancel()``: request, record, serve the record on replay."""
    if session.signal is not None:
        raise session.signal
    rec = session.state.steps.get(step_id)
    if rec is None:
        session._check_unused(step_id, f"cancel of child flow {cid!r}")  # pyright: ignore[reportPrivateUsage]
        session.room()  # a full log begins nothing new (loom.kernel.execution_limits)
        await force(session)  # the child must not be stopped by steps the log may yet lose
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        if messages.dry(session):  # a replay check must not cancel anything
            session._park(step_id, f"step {step_id}: replay reached a child's cancel, not in the history")  # pyright: ignore[reportPrivateUsage]  # fmt: skip
        await _request_live(session, step_id, cid, reason)
        rec = session.state.steps[step_id]
    elif rec.get("effect") != CANCEL:
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has effect {rec.get('effect')!r}, flow cancels a child"
        )
    visit(session, step_id)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]


async def _request_live(session: Session, step_id: str, cid: str, reason: str) -> None:
    # The flow is not blocked meanwhile (as a child's start): the child's cleanup may run
    # here, inline, when there is no dispatcher.
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]
    try:
        with off_scope():
            try:
                await cancel_child(session.rt, cid, reason, HANDLE_BY)
            except (StoreError, ConfigurationError, ExecutionSupersededError) as exc:
                session._raise(AbortSignal(exc))  # pyright: ignore[reportPrivateUsage]
            crash.point("child_cancel_requested", step_id)  # asked, not recorded: asked again
            await session.append([ev.ChildCancelRequested(step_id=step_id, child_id=cid, reason=reason)])  # fmt: skip
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
        session._poke()  # pyright: ignore[reportPrivateUsage]


def cancel_requested_step(s: ExecutionState, e: ev.ChildCancelRequested) -> None:
    """Fold: the step record of a cancel through a handle."""
    s.steps[e.step_id] = {"effect": CANCEL, "status": "completed", "seq": e.seq}
