"""What a session keeps beside its flow: the gates it waits at, and the claim heartbeat.

The heartbeat is a timer, and a task only when it has something to do. While a long effect runs (or a detached step, a firing loop timer) and nothing else is
appended, the session's claim must still be extended. Every ``claim_ttl / 3`` seconds the
heartbeat asks whether that is so and, if it is, appends nothing (the journal prepends the
claim extension when one is due). Most execute calls end long before the first beat: a
timer costs them a handle, where a task sleeping in a loop cost a task to create, to run,
to cancel and to reap on every call.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from loom.fold import GateRecord, ResumeRecord

if TYPE_CHECKING:
    from loom.session import Session


class Waiting:
    """A gate the flow waits at: the future its resume settles, and whether the
    suspension that names it is still to be written (``new``)."""

    __slots__ = ("fut", "gate", "new", "turn")

    def __init__(self, gate: GateRecord, fut: asyncio.Future[ResumeRecord], new: bool) -> None:
        self.gate, self.fut, self.new = gate, fut, new
        self.turn: asyncio.Future[None] | None = None  # the resume's place in the log order


class Heartbeat:
    """Calls ``beat`` every ``period`` seconds while ``due()`` says so, until :meth:`stop`.

    Args:
        period: Seconds between two looks.
        due: Whether a beat is needed now.
        beat: The beat (the next look is ``period`` after it ends; one that raises ends the
            heartbeat, and its task holds the error for whoever reaps it).
        context: The context the beat runs in (the session's, outside any flow scope).
    """

    __slots__ = ("_beat", "_context", "_due", "_handle", "_loop", "_period", "stopped", "task")

    def __init__(
        self,
        period: float,
        due: Callable[[], bool],
        beat: Callable[[], Awaitable[None]],
        context: contextvars.Context,
    ) -> None:
        self._period, self._due, self._beat, self._context = period, due, beat, context
        self._loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        self.stopped = False
        self._handle = self._arm()

    def _arm(self) -> asyncio.TimerHandle:
        return self._loop.call_later(self._period, self._look, context=self._context)

    def _look(self) -> None:
        if self.stopped:
            return
        if self._due():
            self.task = asyncio.Task(self._run(), loop=self._loop, context=self._context)
        else:
            self._handle = self._arm()

    async def _run(self) -> None:
        await self._beat()
        if not self.stopped:
            self._handle = self._arm()

    def stop(self) -> list[asyncio.Task[Any]]:
        """No more beats; the task of the last beat, for the caller to reap (its outcome,
        an error included, is retrieved there)."""
        self.stopped = True
        self._handle.cancel()
        return [self.task] if self.task is not None else []


def tracked_end(session: Session, root: asyncio.Task[Any]) -> asyncio.Future[None]:
    """Track the flow's root task in ``session``; a future done once the task is.

    Awaiting it is ``asyncio.wait([root])``: it raises nothing the flow raised, and a
    cancelled caller leaves the flow running. One done-callback of the task serves the
    session's tracking and this future, where ``asyncio.wait`` added one of its own, and
    each callback costs a loop turn of every execute call.
    """
    ended: asyncio.Future[None] = root.get_loop().create_future()
    session.track(root, partial(_settle, ended))
    return ended


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():  # (cancelled with the call that awaited it)
        ended.set_result(None)
