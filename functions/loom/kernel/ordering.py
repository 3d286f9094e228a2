"""Step outcomes reach the flow in log order, one at a time, live and on replay.

Every outcome a flow awaits (an effect's completion or failure, a verdict, a gate's resume)
has a place in the log: its ``seq``. Live, outcomes are appended in the order they happen;
on replay they are all known at once. Handing them to the flow as soon as they are asked for
would let a replay see two racing steps finish together where the live run saw one, so
``asyncio.wait(..., FIRST_COMPLETED)`` or ``asyncio.as_completed`` would take another branch.

:class:`Ordering` therefore hands outcomes over in ``seq`` order, and between two hand-overs
lets the loop *settle*: it yields until the flow has made no move for a few loop turns, so
every task woken by one outcome runs before the next outcome exists for it. Live outcomes go
through the same gate, so what the flow can observe live is exactly what a replay replays.

The sequential hot path pays nothing: when the flow has a single task, nothing can observe
the interleaving and the next outcome in order is handed over at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from loom.kernel.fold import ExecutionState

_SETTLE_TURNS = 12  # loop turns without a move before the next outcome is handed over


class Ordering:
    """Hands step outcomes to one session's flow in ``seq`` order.

    Args:
        recorded: The seqs of the outcomes already in the log (any order).
        moved: Called after each hand-over (the session's progress signal).
    """

    def __init__(self, recorded: Iterable[float], moved: Callable[[], None]) -> None:
        self._recorded = sorted(recorded)
        # Outcomes after the last recorded one are live: two of them appended together (a
        # resume merged in by a step's append) are handed over one at a time, as a replay
        # of the log they made will hand them over.
        self._last_recorded = self._recorded[-1] if self._recorded else 0
        self._moved = moved
        self._head = 0  # index of the first recorded outcome not yet handed over or passed
        self._waiters: dict[float, asyncio.Future[None]] = {}
        self.driver: asyncio.Task[None] | None = None
        self.open_tasks = 0  # flow tasks not yet done; one means nobody can observe order
        self.moves = 0
        self.busy = 0  # engine work under way in a flow task (a payload read): not quiet

    @property
    def waiting(self) -> bool:
        """Whether an outcome is waiting for its turn (the flow is not blocked)."""
        return bool(self._waiters)

    def _next_recorded(self) -> float:
        return self._recorded[self._head] if self._head < len(self._recorded) else math.inf

    def turn(self, seq: float) -> asyncio.Future[None] | None:
        """Ask to hand over the outcome at ``seq``: None if it may go now, else a future.

        An outcome whose place was already passed (a resume that came before its gate
        opened, or a step nobody awaited at its turn) goes at once.
        """
        self.moves += 1
        recorded = self._recorded  # (``_next_recorded`` inlined: every step asks)
        head = recorded[self._head] if self._head < len(recorded) else math.inf
        if seq <= head and self.open_tasks <= 1 and not self._waiters:
            if seq == head:
                self._head += 1
            return None
        if seq < head and seq <= self._last_recorded and not any(s < seq for s in self._waiters):
            return None  # already passed: nothing ahead of it to wait for
        return self.queue(seq)

    def queue(self, seq: float) -> asyncio.Future[None]:
        """Wait for the turn of the outcome at ``seq`` through the driver, never at once.

        A loop timer's firing takes its turn this way: it is handed over only once the flow
        has settled, so it reaches the flow at the same point live and on replay.
        """
        self.moves += 1
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters[seq] = fut
        if self.driver is None or self.driver.done():
            # Started only when something waits (a sequential flow never pays for it), in an
            # empty context so the flow's task factory does not give it a step scope.
            self.driver = loop.create_task(self._drive(), context=contextvars.Context())
        return fut

    async def _drive(self) -> None:
        """Hand over waiting outcomes, lowest ``seq`` first, letting the loop settle before
        each; ends when nothing waits (the session cancels it when it ends)."""
        while self._waiters:
            await self._settle()
            self._hand_over()
        self._moved()  # nothing waits any more (a cancelled waiter was dropped): re-check

    async def _settle(self) -> None:
        quiet = 0
        while quiet < _SETTLE_TURNS:
            mark = self.moves
            await asyncio.sleep(0)
            quiet = quiet + 1 if self.moves == mark and not self.busy else 0

    def _hand_over(self) -> None:
        for seq in [s for s, f in self._waiters.items() if f.done()]:
            del self._waiters[seq]  # its task was cancelled while it waited
        if not self._waiters:
            return
        seq = min(self._waiters)
        # Recorded outcomes before it that nobody awaited are passed: the flow did not ask
        # for them at their turn (their task was cancelled, or they were never reached).
        while self._next_recorded() <= seq:
            self._head += 1
        self.moves += 1
        self._waiters.pop(seq).set_result(None)
        self._moved()

    def track(self, task: asyncio.Task[Any], then: Callable[[], object] | None = None) -> None:
        """Count ``task`` among the flow's open tasks until it is done, and then call
        ``then`` (in the same done-callback: each one costs a loop turn)."""
        self.open_tasks += 1
        task.add_done_callback(self._task_done if then is None else partial(self._done, then))

    def _task_done(self, _: asyncio.Task[Any]) -> None:
        self.open_tasks -= 1
        self.moves += 1

    def _done(self, then: Callable[[], object], task: asyncio.Task[Any]) -> None:
        self.open_tasks -= 1  # (``_task_done`` inlined: a call less per execute call)
        self.moves += 1
        then()


def recorded_outcomes(state: ExecutionState) -> list[float]:
    """The seqs of the outcomes in ``state`` a replay hands to the flow."""
    steps = state.steps
    if not steps and not state.resumes:  # a fresh execution: nothing to look through
        return []
    seqs: list[float] = [
        rec.get("seq", 0) for rec in steps.values() if rec.get("status") in ("completed", "failed")
    ]
    seqs.extend(r.get("seq", 0) for r in state.resumes.values())
    return seqs
