"""One discipline for every write to a log made outside a running session.

A writer (a resume, a cancel, a verdict, a park in doubt, a poison park, a retry, a message,
a child's result told to its parent) never appends events it computed earlier. It hands
:func:`write` a *decider*: a pure function from a folded state to a :class:`Decision` — the
events to append and the summary change — or a refusal (it raises). :func:`write` folds,
decides, and appends conditioned on the seq that state was folded to. If another writer got
there first (an :class:`~loom.errors.AppendConflictError`), it reloads the log and **decides
again** on the new state, so a decision made on a stale state is never written::

    def decide(state: ExecutionState) -> Decision:
        if key in state.resumes:
            return NOTHING  # a redelivery: already there, idempotent success
        if state.finished:
            raise ExecutionFinishedError(...)  # refused on the state that holds the end
        return Decision([ev.ExecutionResumed(...)], StatusChange("running"))

    state, wrote = await write(rt, state, decide)

A decider may be called several times (once per conflict) and must build new event objects
each time (``write`` numbers them in place). Anything slow or with side effects (encoding a
payload to a blob store, reading another execution) happens once, before ``write``.

A decision also carries what the log owes from before it: an execution whose recorded
deadline has passed gets its timeout's cancel request first (:func:`loom.kernel.timeouts.overdue`),
so no later event gets in ahead of it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from loom import events as ev
from loom.errors import AppendConflictError, ExecutionSupersededError
from loom.kernel import timeouts
from loom.kernel.state import ExecutionState
from loom.store.base import AppendRequest, StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

MAX_DECISIONS: Final = 20
"""Decisions one write makes before it gives up on a log that keeps changing."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What a writer decided from one state.

    Attributes:
        events: The events to append, new objects (numbered by :func:`write`); none: write
            nothing.
        change: The summary fields the append updates, if the status changes.
        at: The time the events are stamped with, when the decision depended on it
            (default: the clock when they are appended).
    """

    events: Sequence[ev.Event] = field(default_factory=tuple[ev.Event, ...])
    change: StatusChange | None = None
    at: float | None = None


NOTHING: Final = Decision()
"""Write nothing: the state already holds what was asked, or there is nothing to do."""

Decide = Callable[[ExecutionState], Decision]


async def write(
    rt: Runtime,
    state: ExecutionState,
    decide: Decide,
    *,
    settle_overdue: bool = True,
    attempts: int = MAX_DECISIONS,
) -> tuple[ExecutionState, bool]:
    """Decide from ``state`` and append conditioned on its seq; on conflict reload and decide
    again (see the module docstring).

    Args:
        rt: The runtime whose store holds the log.
        state: The state the first decision is made on (consumed: folded forward).
        decide: The decider.
        settle_overdue: Write a passed deadline's cancel request ahead of the decision
            (every control write; off for a writer that decides about the deadline itself).
        attempts: Decisions to make before giving up (a writer with somewhere else to go
            under contention, an inbox, gives up sooner).

    Returns:
        The state after the write (or the state the decision to write nothing was made
        on), and whether anything was appended.

    Raises:
        ExecutionSupersededError: The log changed under ``attempts`` decisions in a row.
        Exception: Whatever ``decide`` raises on the state it was given (a refusal).
    """
    for attempt in range(attempts):
        decision = decide(state)
        if not decision.events:
            return state, False
        owed = timeouts.overdue(rt, state) if settle_overdue else []
        events = [*owed, *decision.events]
        ev.number(events, state.last_seq, rt.clock() if decision.at is None else decision.at)
        # ``fence``: it may race a live holder's session (see ``AppendRequest``).
        request = AppendRequest(
            state.execution_id, state.last_seq, events, decision.change, fence=True
        )
        try:
            await rt.store.append(request)
        except AppendConflictError:
            await _back_off(attempt)
            state = await rt.load_state(state.execution_id)
            continue
        return _fold(events, state), True
    raise ExecutionSupersededError(
        f"the log of {state.execution_id!r} kept changing; nothing was written",
        details={"execution_id": state.execution_id},
    )


async def _back_off(conflicts: int) -> None:
    """Wait a little, more after each conflict past the first few: writers racing for one
    log (many senders to one mailbox) spread out instead of all losing again at once."""
    if conflicts >= 2:
        await asyncio.sleep(random.uniform(0, min(0.01 * 2 ** (conflicts - 2), 0.5)))


def _fold(events: list[ev.Event], state: ExecutionState) -> ExecutionState:
    # (Imported when first written: the primitives ``loom.kernel.fold`` imports import this module.)
    from loom.kernel.fold import fold

    return fold(events, state)
