"""Where an execution comes from and what came of it, for the links of its page: its parent
and its children (child flows), the execution it was forked from, the re-drive of a failed
one, and the runs of a flow that continued as new.

Each link is read from what the log already records (``ExecutionStarted.parent`` and
``forked_from``, ``ChildStarted``, ``ExecutionContinued``) plus one summary per execution
linked, so a page never walks the store. A parent with many children shows the first
:data:`CHILDREN_SHOWN` with their status, and says how many there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loom import events as ev
from loom.errors import UnknownExecutionError
from loom.kernel.fold import ExecutionState
from loom.ops.deadletters import failure_point, redrive_id
from loom.primitives.continuation import run_chain
from loom.runtime import Runtime

CHILDREN_SHOWN = 100


@dataclass
class Linked:
    """Another execution this page links to, with where it stands (``"?"``: not found)."""

    execution_id: str
    status: str
    flow: str = ""
    step_id: str = ""


@dataclass
class Lineage:
    """The links of one execution's page.

    Attributes:
        parent: The execution that started this one as a child flow.
        children: The child flows it started (the first :data:`CHILDREN_SHOWN`).
        children_total: How many child flows it started.
        forked_from: The execution this one is a fork (or re-drive) of, with the step it
            runs again from.
        fork_seq: Where the copy of ``forked_from`` was cut.
        redrive: A failed execution's re-drive: the fork that runs it again from its
            failure, and whether it exists yet (status ``""``: not re-driven yet).
        runs: The runs of an execution that continued as new, oldest first (``run``,
            ``run_id``, ``first_seq``, ``last_seq``); one run: empty.
    """

    parent: Linked | None = None
    children: list[Linked] = field(default_factory=list[Linked])
    children_total: int = 0
    forked_from: Linked | None = None
    fork_seq: int | None = None
    redrive: Linked | None = None
    runs: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


async def _linked(runtime: Runtime, execution_id: str, step_id: str = "") -> Linked:
    try:
        row = await runtime.store.summary(execution_id)
    except UnknownExecutionError:  # purged, or a fork whose creation never landed
        return Linked(execution_id, "?", step_id=step_id)
    return Linked(execution_id, row.status, row.flow, step_id)


async def lineage(
    runtime: Runtime, state: ExecutionState, events: Sequence[ev.Event], whole: bool
) -> Lineage:
    """The links of ``state``'s page; ``events`` is the window shown (``whole``: from seq 1),
    which is where the fork origin, the failure point and the runs are read."""
    found = Lineage()
    if state.parent:
        parent = state.parent
        found.parent = await _linked(runtime, parent["execution_id"], parent["step_id"])
    found.children_total = len(state.children)
    for step_id, child in list(state.children.items())[:CHILDREN_SHOWN]:
        found.children.append(await _linked(runtime, child["child_id"], step_id))
    if not whole or not events:
        return found
    first = events[0]
    if isinstance(first, ev.ExecutionStarted) and first.forked_from is not None:
        origin = first.forked_from
        found.forked_from = await _linked(runtime, origin.execution_id, origin.step_id)
        found.fork_seq = origin.seq
    if state.status == "failed":
        cut, step = failure_point(events)
        target = await _linked(runtime, redrive_id(state.execution_id, cut), step or "")
        found.redrive = Linked(
            target.execution_id, "" if target.status == "?" else target.status, step_id=step or ""
        )
    runs = run_chain(state.execution_id, events)
    found.runs = runs if len(runs) > 1 else []
    return found
