"""What a fork (:mod:`loom.ops.fork`) does with the child flows its prefix started.

A child whose end reached the origin before the cut is reused as recorded. A child started
before the cut whose end did not:

* ended since, on its own: reused; its end is copied into the fork (the resume its end
  would have made, read from the child's own log, recorded ``by`` ``loom.fork``);
* still running: reused; the fork is recorded in the child's log, and the child's end is
  told to the fork as to its parent (:mod:`loom.primitives.child_sharing`);
* cancelled by its parent's end (the origin failed or was cancelled, and its children
  were cancelled with it), or gone (purged): started anew. Its start is left out of the
  copy, so the fork's step starts a new child, and so is everything the prefix did with
  the old one: the gate that waited on it, a cancel or a message through its handle, the
  messages it sent the parent. What that child's cancel cut short runs again.

Nothing is written by :func:`plan`; the copy and :func:`loom.primitives.child_sharing.reconnect`
record what it decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import UnknownExecutionError
from loom.kernel.defs import to_json_value
from loom.kernel.fold import ExecutionState
from loom.primitives.child_handle import CASCADE_BY, CHILD_GATE
from loom.primitives.child_sharing import FORK_BY

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime


@dataclass
class ChildPlan:
    """What a fork does with its prefix's children whose end the prefix does not hold.

    Attributes:
        restart: Children started anew (their start and what followed from it dropped).
        ended: Ends to copy into the fork, by child id (``{"status", "output", "error"}``,
            as the ``loom.child`` resume check reads them).
    """

    restart: set[str] = field(default_factory=set[str])
    ended: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])


def unended(kept: Sequence[ev.Event]) -> list[str]:
    """The children started in ``kept`` whose end it does not hold, in start order."""
    ended = {
        e.correlation_key for e in kept if isinstance(e, ev.ExecutionResumed) and e.on == CHILD_GATE
    }
    return [e.child_id for e in kept if isinstance(e, ev.ChildStarted) and e.child_id not in ended]


async def plan(runtime: Runtime, kept: Sequence[ev.Event]) -> ChildPlan:
    """Read each child the prefix started and has not seen end (see the module docstring)."""
    found = ChildPlan()
    for cid in unended(kept):
        try:
            state = await runtime.load_state(cid)
        except UnknownExecutionError:
            found.restart.add(cid)
            continue
        if await _cancelled_with_parent(runtime, state):
            found.restart.add(cid)
        elif state.finished:
            result = await runtime.report(state, include_state=False)
            found.ended[cid] = {
                "status": state.status,
                "output": result.output,
                "error": state.error,
            }
    return found


async def _cancelled_with_parent(runtime: Runtime, state: ExecutionState) -> bool:
    """Whether the child's cancel came from its parent's end (or the parent's own cancel)."""
    if state.cancel is not None:
        return state.cancel.get("by") == CASCADE_BY
    if state.status != "cancelled":
        return False
    # Cancelled at once (it was parked or in doubt): the end itself says who asked.
    last = (await runtime.store.read(state.execution_id, state.last_seq - 1))[-1]
    return isinstance(last, ev.ExecutionCancelled) and last.by == CASCADE_BY


def without(kept: Sequence[ev.Event], restart: set[str]) -> list[ev.Event]:
    """``kept`` without the starts of the children in ``restart`` and what followed from
    them: the waits on them, the cancels and messages through their handles, their
    messages to the parent."""
    if not restart:
        return list(kept)
    return [e for e in kept if not _about(e, restart)]


def _about(e: ev.Event, children: set[str]) -> bool:
    if isinstance(e, ev.ChildStarted | ev.ChildCancelRequested):
        return e.child_id in children
    if isinstance(e, ev.ExecutionSuspended):
        return e.on == CHILD_GATE and e.correlation_key in children
    if isinstance(e, ev.MessageSent):
        return e.to in children
    if isinstance(e, ev.MessageReceived):
        return e.sender in children
    return False


async def ends(runtime: Runtime, eid: str, found: ChildPlan) -> list[ev.Event]:
    """The resumes that copy the ends in ``found`` into the fork ``eid`` (not numbered)."""
    events: list[ev.Event] = []
    for cid, outcome in found.ended.items():
        stored, _ = await runtime.payloads.encode(to_json_value(outcome), f"{eid}/resume")
        resumed = ev.ExecutionResumed(
            on=CHILD_GATE, correlation_key=cid, payload=stored, by=FORK_BY
        )
        events.append(resumed)
    return events
