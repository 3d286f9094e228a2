"""What a session keeps beside its flow: the gates it waits at, and the claim heartbeat.

While a long effect runs (or a detached step, a firing loop timer) and nothing else is
appended, the session's claim must still be extended. At least every ``claim_ttl / 3``
seconds the heartbeat asks whether that is so and, if it is, appends nothing (the journal
prepends the claim extension when one is due, so an early look writes nothing). The looks
of every session on a loop come from one shared timer, and a beat is a task only when there
is something to do: most execute calls end long before the first look, and pay for neither.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from loom.kernel.fold import GateRecord, ResumeRecord

if TYPE_CHECKING:
    from loom.kernel.session import Session


class Waiting:
    """A gate the flow waits at: the future its resume settles, and whether the
    suspension that names it is still to be written (``new``)."""

    __slots__ = ("fut", "gate", "new", "turn")

    def __init__(self, gate: GateRecord, fut: asyncio.Future[ResumeRecord], new: bool) -> None:
        self.gate, self.fut, self.new = gate, fut, new
        self.turn: asyncio.Future[None] | None = None  # the resume's place in the log order


class Heartbeat:
    """Calls ``beat`` while ``due()`` says so, looking at least every ``period`` seconds, until
    :meth:`stop`.

    Args:
        period: Longest time between two looks.
        due: Whether a beat is needed now.
        beat: The beat (no look while one runs; one that raises ends the heartbeat, and its
            task holds the error for whoever reaps it).
        context: The context the beat runs in (the session's, outside any flow scope).
    """

    __slots__ = ("_beat", "_context", "_due", "_loop", "_ticker", "stopped", "task")

    def __init__(
        self,
        period: float,
        due: Callable[[], bool],
        beat: Callable[[], Coroutine[Any, Any, None]],
        context: contextvars.Context,
    ) -> None:
        self._due, self._beat, self._context = due, beat, context
        self._loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        self.stopped = False
        self._ticker = _Ticker.of(self._loop, period)
        self._ticker.beats.add(self)

    def look(self) -> None:
        """Beat, in a task of its own, if a beat is due and none runs."""
        task = self.task
        if task is not None and not task.done():
            return
        if task is not None and (task.cancelled() or task.exception() is not None):
            self.stop()  # a failed beat ends the heartbeat (its task is reaped, error and all)
        elif not self.stopped and self._due():
            self.task = asyncio.Task(self._beat(), loop=self._loop, context=self._context)

    def stop(self) -> list[asyncio.Task[Any]]:
        """No more beats; the task of the last beat, for the caller to reap (its outcome,
        an error included, is retrieved there)."""
        self.stopped = True
        self._ticker.beats.discard(self)
        return [self.task] if self.task is not None else []


class _Ticker:
    """One loop timer for the heartbeats of every session of one period on one loop: a
    call that ends before the first tick arms nothing of its own, where a timer of its
    own cost it a handle to create, to schedule and to cancel."""

    __slots__ = ("_handle", "_period", "beats")

    _ALL: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Ticker]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, period: float) -> None:
        self._period = period  # (no reference to the loop: the loop's entry above is weak)
        self.beats: set[Heartbeat] = set()
        self._handle: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, period: float) -> _Ticker:
        """The ticker of ``period`` on ``loop``, armed."""
        tickers = cls._ALL.get(loop)
        if tickers is None:
            tickers = cls._ALL[loop] = {}
        ticker = tickers.get(period)
        if ticker is None:
            ticker = tickers[period] = cls(period)
        if ticker._handle is None:
            ticker._arm()
        return ticker

    def _arm(self) -> None:
        # In an empty context: the loop's own timer, never a flow's (``loop_timers``).
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self._period, self._tick, context=contextvars.Context())

    def _tick(self) -> None:
        self._handle = None
        for heartbeat in list(self.beats):
            heartbeat.look()
        if self.beats:  # (else the next heartbeat arms it again)
            self._arm()


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
