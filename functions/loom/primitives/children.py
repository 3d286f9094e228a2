"""Child flows: ``ctx.execute_flow`` and ``ctx.start_flow``.

A child flow is an execution of its own, with its own log, claims and dispatches. Its id is
derived from the parent's id and the step that starts it (:func:`child_id`), so however
often the parent's step is replayed, and whenever its worker dies, one child exists. The
step, live:

1. creates the child's ``ExecutionStarted`` (with ``parent``); an existing one with the same
   parent is the same child (a replay after a crash);
2. dispatches it (dispatch id ``{child}:1``, which Cloud Tasks deduplicates);
3. records ``ChildStarted`` in the parent's log.

Waiting for the child is a gate on ``loom.child`` keyed by the child's id, at step
``{step}/child``. When the child ends (completed, failed, cancelled) its worker resumes
that gate through ``Runtime.resume``, whose check for ``loom.child`` reads
``{"status", "output", "error"}`` from the child's own log (so no route can forge it), and
which appends to the parent and dispatches it: the parent is woken by the normal dispatch path, never by
polling. The child's worker does this after every execute call that finds the child ended,
so a worker that died in between is made good by the redelivery (a duplicate resume is a
no-op). A failed or cancelled child raises :class:`~loom.errors.ChildFlowFailedError`.

When the parent ends, its children still running are cancelled (``on_cancel="cancel"``,
the default) or left alone (``"abandon"``); a parent whose wait on a child is cancelled
requests the child's cancel at once.

**Options** (``ctx.start_flow``/``ctx.execute_flow`` keywords, each recorded where it
governs): ``execution_id`` names the child instead of the derived id (a conflict is the
``ChildIdTakenError`` below; an id of a form the engine derives is refused, raised into the
flow before anything is written); ``timeout`` is the child's own execution timeout (its
``ExecutionStarted.deadline``, cancelled with cleanup past it); ``version`` pins the flow
version the child runs on for its whole life; ``queue`` starts it on a declared queue. A
replay serves the recorded child: an explicit id the code no longer gives (or another one)
parks the parent as nondeterministic, as a child of another flow does. An explicit id is
unique across runs of a parent that continued as new (the run is part of the recorded
parent), so run 2 starting the id run 1 started is told it is taken, never handed run 1's
child. The handle (:mod:`loom.primitives.child_handle`) cancels the child and sends it
messages.

The child's id is the engine's: an id of the child form (``{parent}.child.{step}``, the
step being numbers joined by dots) is refused to every outside start (HTTP, CLI, the
Python API, a fork) with :class:`~loom.errors.ReservedExecutionIdError` (HTTP 400). An
execution holding the id anyway (created before that rule, or written to the store by
hand) that is not this child (another parent, step or flow) makes the start fail in the
flow with :class:`~loom.errors.ChildIdTakenError` (``child_id_taken``), naming the holder's
flow and parent. The failure is recorded as the step's ``EffectFailed`` (effect
``loom.child:{flow}``), so a replay raises it again without looking at the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from loom import crash
from loom import events as ev
from loom.errors import (
    ChildIdTakenError,
    ExecutionFinishedError,
    InputError,
    LoomError,
    UnknownExecutionError,
)
from loom.kernel import cancellation
from loom.kernel.context import FlowContext, next_step_id, off_scope
from loom.kernel.defs import FlowDef, to_json_value
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.inbox import post, resume_item
from loom.kernel.primitive import Primitive
from loom.kernel.timeouts import deadline_for
from loom.primitives import child_sharing, queues
from loom.primitives.child_grants import check_children, child_grants
from loom.primitives.child_handle import (
    CASCADE_BY,
    CHILD_GATE,
    ChildFlow,
    cancel_child,
    cancel_requested_step,
)
from loom.primitives.child_ids import child_id
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
from loom.primitives.child_sharing import SHARED, is_shared, reconnect

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.primitives.queues import QueueRef

__all__ = ["CHILD_GATE", "ChildFlow", "ChildOptions", "OnCancel", "child_id", "start_flow"]

log = logging.getLogger("loom")

OnCancel = Literal["cancel", "abandon"]


async def start_flow(
    session: Session,
    step_id: str,
    flow: str | Callable[..., Any],
    value: Any,
    options: ChildOptions,
) -> ChildFlow:
    """The session side of ``ctx.start_flow``: see the module docstring."""
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


# -- the child's end, told to its parent; the parent's end, told to its children ---------


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


# -- the fold -------------------------------------------------------------------------


def _child_started(s: ExecutionState, e: ev.ChildStarted) -> None:
    child = {"child_id": e.child_id, "flow": e.flow, "on_cancel": e.on_cancel}
    if e.explicit_id:
        child["explicit"] = "1"
    s.children[e.step_id] = child


def _child_step(s: ExecutionState, e: ev.ChildStarted) -> None:
    # A step record too, so an effect called where the log started a child diverges.
    s.steps[e.step_id] = {"effect": child_step_effect(e.flow), "status": "child"}


class ChildrenContext(FlowContext):
    """The ``ctx`` methods of child flows."""

    __slots__ = ()

    async def execute_flow(
        self,
        flow: str | Callable[..., Any],
        input: Any = None,
        *,
        on_cancel: str = "cancel",
        queue: QueueRef | None = None,
        execution_id: str | None = None,
        timeout: float | timedelta | None = None,
        version: str | int | None = None,
    ) -> Any:
        """Run ``flow`` as a child execution and return its output (the options: see
        :meth:`start_flow`).

        Raises:
            ChildFlowFailedError: The child failed or was cancelled.
            ChildIdTakenError: ``execution_id`` is held by another execution.
        """
        child = await self.start_flow(
            flow,
            input,
            on_cancel=on_cancel,
            queue=queue,
            execution_id=execution_id,
            timeout=timeout,
            version=version,
        )
        return await child.result()

    async def start_flow(
        self,
        flow: str | Callable[..., Any],
        input: Any = None,
        *,
        on_cancel: str = "cancel",
        queue: QueueRef | None = None,
        execution_id: str | None = None,
        timeout: float | timedelta | None = None,
        version: str | int | None = None,
    ) -> ChildFlow:
        """Start ``flow`` as a child execution; await the returned handle for its output,
        or cancel it or send it messages through it (:mod:`loom.primitives.child_handle`).

        Args:
            flow: The child's flow, by name or function.
            input: Its input.
            on_cancel: What this execution's end does to the child if it still runs,
                ``"cancel"`` it or ``"abandon"`` it.
            queue: The declared queue (and partition key) the child runs on.
            execution_id: The child's id (default: derived from this execution's id and
                the step, ``{parent}.child.{step}``).
            timeout: The child's execution timeout (default: its flow's): past it the
                child is cancelled, with cleanup.
            version: The version of ``flow`` the child runs on (default: the latest).

        Raises:
            ChildIdTakenError: ``execution_id`` is held by another execution (recorded).
            InvalidExecutionIdError: ``execution_id`` breaks the id rule or has a form the
                engine derives (nothing recorded).
            UnknownFlowError: No such flow or version.
        """
        sid = next_step_id(self)
        options = ChildOptions(on_cancel, queue, execution_id, timeout, version)
        return await start_flow(self._session, sid, flow, input, options)


def _has_family(state: ExecutionState) -> bool:
    return state.parent is not None or bool(state.children) or bool(state.shared_with)


PRIMITIVE = Primitive(
    "children",
    head={
        "ChildStarted": _child_started,
        "ChildShared": child_sharing.shared_with,
        "ExecutionForked": child_sharing.forked,
    },
    step={"ChildStarted": _child_step, "ChildCancelRequested": cancel_requested_step},
    context=ChildrenContext,
    resume_checks={CHILD_GATE: check_child_resume},
    follow_up=follow_up,
    follows_up=_has_family,
)
