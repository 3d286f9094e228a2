"""Children shared with a fork of their parent (see :mod:`loom.ops.fork`).

A fork reuses the start of a child its origin started before the cut: the fork's log holds
a copy of the origin's ``ChildStarted``, and the fork waits for that same child rather than
starting another. When the child has not ended yet, the fork is recorded in the child's own
log (:class:`~loom.events.ChildShared`), and the child's end is then told to every
execution that shares it as to its parent. In the fork's state the children copied from its
origin are marked ``shared``: the fork's end never cancels them (they are its origin's), and
a replay takes their recorded ids whatever the flow's code computes for them now (an id
derived from ``ctx.execution_id`` names another execution under the fork's id).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Final

from loom import events as ev
from loom.errors import ExecutionFinishedError, UnknownExecutionError
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.fold import ExecutionState, resume_key
from loom.primitives.child_handle import CHILD_GATE

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

log = logging.getLogger("loom")

SHARED: Final = "shared"
"""The mark of a child copied from a fork's origin, in ``ExecutionState.children``."""
FORK_BY: Final = "loom.fork"
"""``by`` of what a fork records for its origin's children (their ends)."""


async def share(rt: Runtime, child_id: str, fork_id: str) -> ExecutionState:
    """Record in ``child_id``'s log that ``fork_id`` shares it, unless it ended already or
    holds the record; the child's state after (decided from its log, on every reload)."""
    state = await rt.load_state(child_id)

    def decide(now: ExecutionState) -> Decision:
        if now.finished or fork_id in now.shared_with:
            return NOTHING  # ended: the caller tells the fork its end itself
        return Decision([ev.ChildShared(execution_id=fork_id)])

    state, _ = await write(rt, state, decide)
    return state


def is_shared(parent: ExecutionState, child_id: str) -> bool:
    """Whether ``parent``'s log holds ``child_id`` as a child it shares with its origin."""
    return any(c.get("child_id") == child_id and c.get(SHARED) for c in parent.children.values())


# -- the fold -------------------------------------------------------------------------------


def shared_with(s: ExecutionState, e: ev.ChildShared) -> None:
    """In the child: one more execution to tell its end."""
    if e.execution_id not in s.shared_with:
        s.shared_with.append(e.execution_id)


def forked(s: ExecutionState, e: ev.ExecutionForked) -> None:
    """In the fork: the children its copied prefix started are its origin's, shared."""
    for child in s.children.values():
        child[SHARED] = "1"


async def reconnect(rt: Runtime, fork_id: str) -> None:
    """Make every child ``fork_id`` shares and has not seen end tell it its end: recorded
    as shared in the child's log while it runs, or, ended already, its end resumed into
    the fork now (read from the child's log by the resume check, as always). Idempotent:
    a fork call repeated after a crash makes up what the first left undone.
    """
    state = await rt.load_state(fork_id)
    for child in list(state.children.values()):
        cid = child["child_id"]
        if not child.get(SHARED) or resume_key(CHILD_GATE, cid) in state.resumes:
            continue
        try:
            now = await share(rt, cid, fork_id)
        except UnknownExecutionError:  # purged: nothing is left to tell the fork its end
            log.warning("fork %s shares child %s, which no longer exists", fork_id, cid)
            continue
        if now.finished:  # it ended before the record: its end is told here
            with contextlib.suppress(ExecutionFinishedError):
                await rt.resume(fork_id, CHILD_GATE, cid, None, by=FORK_BY)
