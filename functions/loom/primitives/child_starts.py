"""Starting a child flow, the live side of ``ctx.start_flow`` (:mod:`loom.primitives.children`):
the recorded child served on replay, or the child created, dispatched and recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loom import crash
from loom import events as ev
from loom.errors import ChildIdTakenError
from loom.kernel import cancellation
from loom.kernel.context import off_scope
from loom.kernel.defs import FlowDef, to_json_value
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.kernel.timeouts import deadline_for
from loom.primitives import queues
from loom.primitives.child_grants import check_children, child_grants
from loom.primitives.child_handle import ChildFlow
from loom.primitives.child_options import (
    ChildOptions,
    check_recorded_id,
    child_step_effect,
    flow_def,
    live_id,
    record_taken,
    recorded_def,
    recorded_failure,
)

if TYPE_CHECKING:
    from loom.kernel.session import Session

__all__ = ["start_flow"]


async def start_flow(
    session: Session,
    step_id: str,
    flow: str | Callable[..., Any],
    value: Any,
    options: ChildOptions,
) -> ChildFlow:
    """The session side of ``ctx.start_flow``: see :mod:`loom.primitives.children`."""
    if session.signal is not None:
        raise session.signal
    if options.on_cancel not in ("cancel", "abandon"):
        raise ValueError(f"on_cancel must be 'cancel' or 'abandon', got {options.on_cancel!r}")
    visit(session, step_id)
    recorded = session.state.children.get(step_id)
    failed = session.state.steps.get(step_id) if recorded is None else None
    if recorded is not None:  # served from the log: the child exists
        defn = recorded_def(session, flow, options)
        if recorded["flow"] != defn.name:
            session._park(  # pyright: ignore[reportPrivateUsage]
                step_id,
                f"step {step_id}: log has child flow {recorded['flow']!r}, flow {defn.name!r}",
            )
        check_recorded_id(session, step_id, recorded, options.execution_id)
        return ChildFlow(session, step_id, recorded["child_id"], defn, options.on_cancel)
    if failed is not None:  # the start failed, recorded: raise it again
        await recorded_failure(session, step_id, recorded_def(session, flow, options), failed)
    defn = flow_def(session, flow, options.version)
    cid = live_id(session, step_id, defn, options)
    session._check_unused(step_id, f"child flow {defn.name!r}")  # pyright: ignore[reportPrivateUsage]
    session.room()  # a full log starts nothing new (loom.kernel.execution_limits)
    await force(session)  # the child must not see steps the log may yet lose
    await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
    await check_children(session, step_id, defn.name, child_step_effect(defn.name))
    await _start_live(session, step_id, cid, defn, value, options)
    return ChildFlow(session, step_id, cid, defn, options.on_cancel)


async def _start_live(
    session: Session, step_id: str, cid: str, defn: FlowDef, value: Any, options: ChildOptions
) -> None:
    rt = session.rt
    # The flow is not blocked while its child starts: were another task of it waiting on a
    # gate or timer, the parent would otherwise suspend mid-start and never record the
    # child it created (an orphan its end does not cancel).
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]
    taken: ChildIdTakenError | None = None
    try:
        with off_scope():
            created = _create(session, step_id, cid, defn, value, options)
            holder = await session._unless_store_fails(created)  # pyright: ignore[reportPrivateUsage]
            if holder is not None:
                taken = await record_taken(session, step_id, cid, defn, holder)
            else:
                crash.point("child_created", step_id)
                await rt._dispatch(cid, defn.name, "start", f"{cid}:1")  # pyright: ignore[reportPrivateUsage]
                crash.point("child_dispatched", step_id)
                started = ev.ChildStarted(
                    step_id=step_id,
                    child_id=cid,
                    flow=defn.name,
                    on_cancel=options.on_cancel,  # type: ignore[arg-type]
                    explicit_id=options.execution_id is not None,
                )
                await session.append([started])
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
        session._poke()  # pyright: ignore[reportPrivateUsage]
    if taken is not None:  # the outcome reaches the flow in log order, as a failed step's
        await session._turn(session.state.steps[step_id].get("seq", 0))  # pyright: ignore[reportPrivateUsage]
        raise taken


async def _create(
    session: Session, step_id: str, cid: str, defn: FlowDef, value: Any, options: ChildOptions
) -> ev.ExecutionStarted | None:
    """Create the child; the start of the execution holding ``cid`` if it is not this child."""
    rt, now = session.rt, session.rt.clock()
    parsed = to_json_value(defn.typed.parse_input(value))
    stored, _ = await rt.payloads.encode(parsed, f"{cid}/input")
    parent = {"execution_id": session.execution_id, "step_id": step_id}
    # Per-flow grant rules hold for children (loom.primitives.child_grants).
    held = await child_grants(rt, session.execution_id, session.state.capabilities, defn.name)
    if options.execution_id is not None and session.state.run > 1:
        # A derived id names its run already; an explicit one is the same in every run, and
        # run 2 must not take run 1's child for its own.
        parent["run"] = str(session.state.run)
    started = ev.ExecutionStarted(
        execution_id=cid,
        flow=defn.name,
        input=stored,
        flow_version=defn.version,
        capabilities=held[0],
        by=held[1],
        at=now,
        deadline=deadline_for(defn, options.timeout, now),
        parent=parent,
        **queues.started_fields(rt.app, options.queue),  # within the queue's limits
        step_numbering=session.state.step_numbering,  # numbered as its parent is
    )
    created, first = await rt.store.create(started)
    if not created and (first.parent, first.flow) != (parent, defn.name):
        return first
    return None
