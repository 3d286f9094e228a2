"""Ends told across a family of flows (:mod:`loom.primitives.children`): an ended child
resumes its parent (and the forks sharing it), an ended parent cancels its children still
running, and the resume check of ``loom.child`` reads the outcome from the child's own log.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from loom import crash
from loom.errors import ExecutionFinishedError, InputError, LoomError, UnknownExecutionError
from loom.kernel.defs import to_json_value
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.inbox import post, resume_item
from loom.primitives.child_handle import CASCADE_BY, CHILD_GATE, cancel_child
from loom.primitives.child_sharing import SHARED, is_shared, reconnect

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

__all__ = ["check_child_resume", "follow_up"]

log = logging.getLogger("loom")


async def follow_up(rt: Runtime, state: ExecutionState) -> None:
    """After an execute call: an ended child resumes its parent (and the forks sharing it);
    an ended parent cancels its children still running (those started with
    ``on_cancel="cancel"``); a fork waiting on children it shares makes sure they will tell
    it their ends."""
    if not state.finished:
        if _awaits_shared(state):  # a fork whose copy landed and whose children were not
            await reconnect(rt, state.execution_id)  # all told of it (it died in between)
        return
    try:
        if state.parent is not None or state.shared_with:
            crash.point("child_ended")  # ended, its parent not told yet
            await _tell_parent(rt, state)
        for child in _running_children(state):
            reason = f"parent {state.execution_id} ended {state.status}"
            await cancel_child(rt, child, reason, CASCADE_BY)
    except LoomError as exc:  # the redelivery of this execute call tries again
        log.warning("child flow follow-up of %s failed: %s", state.execution_id, exc)
        raise


def _awaits_shared(state: ExecutionState) -> bool:
    """Whether ``state`` (a fork) shares a child whose end it has not been told."""
    return any(
        c.get(SHARED) and resume_key(CHILD_GATE, c["child_id"]) not in state.resumes
        for c in state.children.values()
    )


def _running_children(state: ExecutionState) -> list[str]:
    return [
        c["child_id"]
        for c in state.children.values()
        if c.get("on_cancel") == "cancel"
        and not c.get(SHARED)  # its origin's child: the fork's end leaves it alone
        and resume_key(CHILD_GATE, c["child_id"]) not in state.resumes
    ]


async def _tell_parent(rt: Runtime, state: ExecutionState) -> None:
    """Tell the parent, and every fork of it that shares this child, that the child ended:
    through each one's inbox where the store keeps one (one write of its own, and a wake its
    siblings share: ``loom.kernel.inbox``), else as a resume appended to its log."""
    told = [(state.parent or {}).get("execution_id"), *state.shared_with]
    parents = [p for p in told if p is not None]
    # In process (no dispatcher, or an inline one) the parent's own call is usually still
    # running its child: a resume reaches its live session at once, and there is no
    # network dispatch for an inbox's shared wake to save.
    in_process = rt.dispatcher is None or rt.dispatcher.inline
    if rt.store.inbox() is None or in_process:
        for parent_id in parents:
            with contextlib.suppress(ExecutionFinishedError, UnknownExecutionError):
                await rt.resume(parent_id, CHILD_GATE, state.execution_id, None)
        return
    # The outcome is read here, from the child's own state (what ``check_child_resume``
    # reads for a resume): the inbox is written by the engine alone.
    result = await rt.report(state, include_state=False)
    outcome = {"status": state.status, "output": result.output, "error": state.error}
    for parent_id in parents:
        stored, _ = await rt.payloads.encode(to_json_value(outcome), f"{parent_id}/resume")
        item = resume_item(CHILD_GATE, state.execution_id, stored, None, rt.clock())
        await post(rt, parent_id, item)


async def check_child_resume(
    rt: Runtime, parent: ExecutionState, child: str, payload: Any
) -> dict[str, Any]:
    """The resume check of ``loom.child``, whatever the route: the outcome recorded is read
    from the child's own log, never taken from the request, so nobody can forge a child's
    result; a child of another parent (unless ``parent``'s log holds it as one it shares
    with its fork origin), or one still running, is refused.

    Raises:
        UnknownExecutionError: No such child.
        InputError: The execution is not a child of ``parent``, or has not ended.
    """
    state = await rt.load_state(child)
    own = (state.parent or {}).get("execution_id") == parent.execution_id
    if not (own or is_shared(parent, child)):
        raise InputError(
            f"{child!r} is not a child flow of {parent.execution_id!r}",
            details={"child_id": child},
        )
    if not state.finished:
        raise InputError(f"child flow {child!r} has not ended", details={"child_id": child})
    result = await rt.report(state, include_state=False)  # the output as the child returned it
    return {"status": state.status, "output": result.output, "error": state.error}
