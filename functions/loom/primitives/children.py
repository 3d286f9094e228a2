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

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from loom import crash
from loom import events as ev
from loom.errors import (
    ChildFlowFailedError,
    ChildIdTakenError,
    ExecutionFinishedError,
    InputError,
    LimitExceededError,
    LoomError,
    StoreError,
    UnknownExecutionError,
    UnknownFlowError,
)
from loom.ids import MAX_ID_BYTES
from loom.kernel import cancellation
from loom.kernel.context import FlowContext, next_step_id, off_scope
from loom.kernel.defs import FlowDef, to_json_value
from loom.kernel.divergence import visit
from loom.kernel.durability import force
from loom.kernel.fold import ExecutionState, StepRecord, resume_key
from loom.kernel.inbox import post, resume_item
from loom.kernel.primitive import Primitive
from loom.kernel.timeouts import deadline_for
from loom.primitives import queues
from loom.primitives.child_grants import check_children, child_grants

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.primitives.queues import QueueRef

__all__ = ["CHILD_GATE", "ChildFlow", "OnCancel", "child_id", "start_flow"]

log = logging.getLogger("loom")

CHILD_GATE = "loom.child"
"""The gate a parent waits on for a child's end, keyed by the child's id."""

OnCancel = Literal["cancel", "abandon"]


def child_id(parent_id: str, step_id: str, run: int = 1) -> str:
    """The id of the child started at ``step_id`` of ``parent_id``: ``{parent}.child.{step}``,
    ``{parent}#run{n}.child.{step}`` in run ``n`` > 1 of a parent that continued as new (its
    step ids start again); a digest of the parent's id stands in when the id would break
    the id length rule."""
    parent = parent_id if run == 1 else f"{parent_id}#run{run}"
    plain = f"{parent}.child.{step_id}"
    if len(plain.encode()) <= MAX_ID_BYTES:
        return plain
    digest = hashlib.sha256(parent.encode()).hexdigest()[:40]
    return f"{digest}.child.{step_id}"


def _child_step_effect(flow: str) -> str:
    """The ``effect`` of a child start's step record (``ChildStarted``, or its failure)."""
    return f"loom.child:{flow}"


def _flow_def(session: Session, flow: str | Callable[..., Any]) -> FlowDef:
    app = session.rt.app
    if isinstance(flow, str):
        return app.get_flow(flow)
    for known in app.flows.values():
        if known.fn is flow:
            return known
    raise UnknownFlowError(f"{flow!r} is not a flow registered on this app")


class ChildFlow:
    """A child flow started by ``ctx.start_flow``: await it (or :meth:`result`) for its output.

    Attributes:
        execution_id: The child execution's id.
        flow: The child's flow name.
    """

    def __init__(self, session: Session, step_id: str, cid: str, defn: FlowDef, on_cancel: str):
        self._session, self._step_id, self._defn = session, step_id, defn
        self._on_cancel = on_cancel
        self.execution_id, self.flow = cid, defn.name
        self._outcome: dict[str, Any] | None = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    async def result(self) -> Any:
        """The child's output (typed by its flow), once it ends.

        Raises:
            ChildFlowFailedError: The child failed or was cancelled.
        """
        if self._outcome is None:
            self._outcome = await self._wait()
        got = self._outcome
        if got.get("status") == "completed":
            return self._defn.typed.parse_output(got.get("output"))
        error: dict[str, Any] = got.get("error") or {}
        raise ChildFlowFailedError(
            f"child flow {self.flow!r} ({self.execution_id}) {got.get('status')}: "
            f"{error.get('message', '')}",
            child_id=self.execution_id,
            flow=self.flow,
            status=str(got.get("status")),
            error=error,
        )

    async def _wait(self) -> dict[str, Any]:
        session, cid = self._session, self.execution_id
        try:
            got = await session.gate(f"{self._step_id}/child", CHILD_GATE, cid, None)
        except asyncio.CancelledError:
            if self._on_cancel == "cancel" and cancellation.handed_over(session):
                try:
                    await _cancel(session.rt, cid, f"parent {session.execution_id} was cancelled")
                except StoreError as exc:  # the store's failure is not the flow's: the end's
                    # follow-up cancels the child again (loom.kernel.primitive follow-ups)
                    log.warning("cancelling child %s failed, retried at the end: %s", cid, exc)
            raise
        return got if isinstance(got, dict) else {"status": "failed"}  # pyright: ignore[reportUnknownVariableType]


async def start_flow(
    session: Session,
    step_id: str,
    flow: str | Callable[..., Any],
    value: Any,
    on_cancel: str,
    queue: QueueRef | None = None,
) -> ChildFlow:
    """The session side of ``ctx.start_flow``: see the module docstring."""
    if session.signal is not None:
        raise session.signal
    if on_cancel not in ("cancel", "abandon"):
        raise ValueError(f"on_cancel must be 'cancel' or 'abandon', got {on_cancel!r}")
    defn = _flow_def(session, flow)
    visit(session, step_id)
    recorded = session.state.children.get(step_id)
    cid = child_id(session.execution_id, step_id, session.state.run)
    failed = session.state.steps.get(step_id) if recorded is None else None
    if failed is not None:  # the start failed, recorded: raise it again
        await _recorded_failure(session, step_id, defn, failed)
    if recorded is None:
        session._check_unused(step_id, f"child flow {defn.name!r}")  # pyright: ignore[reportPrivateUsage]
        session.room()  # a full log starts nothing new (loom.kernel.execution_limits)
        await force(session)  # the child must not see steps the log may yet lose
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        await check_children(session, step_id, defn.name, _child_step_effect(defn.name))
        await _start_live(session, step_id, cid, defn, (value, queue), on_cancel)
    elif recorded["flow"] != defn.name:
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has child flow {recorded['flow']!r}, flow {defn.name!r}"
        )
    return ChildFlow(session, step_id, cid, defn, on_cancel)


async def _recorded_failure(
    session: Session, step_id: str, defn: FlowDef, rec: StepRecord
) -> NoReturn:
    """Raise the recorded failure of the child start at ``step_id`` (parks on another step)."""
    if rec.get("effect") != _child_step_effect(defn.name) or rec.get("status") != "failed":
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has {rec.get('effect')!r}, flow starts {defn.name!r}"
        )
    visit(session, step_id)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]
    error = rec.get("error") or {}
    if error.get("code") == LimitExceededError.code:
        raise LimitExceededError(str(error.get("message", "")), details={"step_id": step_id})
    raise _taken_from(str(error.get("message", "")))


# The recorded message names the holder in JSON strings, so a replay rebuilds the error's
# attributes from the log alone (an ``ErrorInfo`` keeps code, type and message only).
_TAKEN = (
    "child flow id {cid} is held by an execution of flow {flow} with parent {parent}, "
    "not by this start's child; the child start fails"
)
_TAKEN_RE = re.compile(
    r'child flow id ("(?:[^"\\]|\\.)*") is held by an execution of flow ("(?:[^"\\]|\\.)*")'
    r' with parent ("(?:[^"\\]|\\.)*"|null)'
)


def _taken(cid: str, holder: ev.ExecutionStarted) -> ChildIdTakenError:
    parent = (holder.parent or {}).get("execution_id")
    dumped = {"cid": json.dumps(cid), "flow": json.dumps(holder.flow)}
    message = _TAKEN.format(**dumped, parent=json.dumps(parent))
    return ChildIdTakenError(message, child_id=cid, holder_flow=holder.flow, holder_parent=parent)


def _taken_from(message: str) -> ChildIdTakenError:
    found = _TAKEN_RE.match(message)
    cid, flow, parent = (json.loads(g) for g in found.groups()) if found else ("", "", None)
    return ChildIdTakenError(message, child_id=cid, holder_flow=flow, holder_parent=parent)


async def _start_live(
    session: Session,
    step_id: str,
    cid: str,
    defn: FlowDef,
    start: tuple[Any, QueueRef | None],
    on_cancel: str,
) -> None:
    rt = session.rt
    # The flow is not blocked while its child starts: were another task of it waiting on a
    # gate or timer, the parent would otherwise suspend mid-start and never record the
    # child it created (an orphan its end does not cancel).
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]
    taken: ChildIdTakenError | None = None
    try:
        with off_scope():
            holder = await session._unless_store_fails(_create(session, step_id, cid, defn, *start))  # pyright: ignore[reportPrivateUsage]
            if holder is not None:
                taken = await _record_taken(session, step_id, cid, defn, holder)
            else:
                crash.point("child_created", step_id)
                await rt._dispatch(cid, defn.name, "start", f"{cid}:1")  # pyright: ignore[reportPrivateUsage]
                crash.point("child_dispatched", step_id)
                started = ev.ChildStarted(step_id=step_id, child_id=cid, flow=defn.name, on_cancel=on_cancel)  # type: ignore[arg-type]  # fmt: skip
                await session.append([started])
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
        session._poke()  # pyright: ignore[reportPrivateUsage]
    if taken is not None:  # the outcome reaches the flow in log order, as a failed step's
        await session._turn(session.state.steps[step_id].get("seq", 0))  # pyright: ignore[reportPrivateUsage]
        raise taken


async def _record_taken(
    session: Session, step_id: str, cid: str, defn: FlowDef, holder: ev.ExecutionStarted
) -> ChildIdTakenError:
    """Record the child start at ``step_id`` as failed (the id is taken); the error."""
    error = _taken(cid, holder)
    info = ev.ErrorInfo(code=error.code, type=type(error).__name__, message=error.message)
    failed = ev.EffectFailed(step_id=step_id, effect=_child_step_effect(defn.name), error=info)
    await session.append([failed])
    return error


async def _create(
    session: Session, step_id: str, cid: str, defn: FlowDef, value: Any, queue: QueueRef | None
) -> ev.ExecutionStarted | None:
    """Create the child; the start of the execution holding ``cid`` if it is not this child."""
    rt, now = session.rt, session.rt.clock()
    parsed = to_json_value(defn.typed.parse_input(value))
    stored, _ = await rt.payloads.encode(parsed, f"{cid}/input")
    parent = {"execution_id": session.execution_id, "step_id": step_id}
    # Per-flow grant rules hold for children (loom.primitives.child_grants).
    held = await child_grants(rt, session.execution_id, session.state.capabilities, defn.name)
    started = ev.ExecutionStarted(
        execution_id=cid,
        flow=defn.name,
        input=stored,
        flow_version=defn.version,
        capabilities=held[0],
        by=held[1],
        at=now,
        deadline=deadline_for(defn, None, now),
        parent=parent,
        **queues.started_fields(rt.app, queue),  # a child on a queue runs within its limits
        step_numbering=session.state.step_numbering,  # numbered as its parent is
    )
    created, first = await rt.store.create(started)
    if not created and (first.parent, first.flow) != (parent, defn.name):
        return first
    return None


async def _cancel(rt: Runtime, cid: str, reason: str) -> None:
    with off_scope(), contextlib.suppress(ExecutionFinishedError, UnknownExecutionError):
        await rt.cancel(cid, reason, by="loom.parent")


# -- the child's end, told to its parent; the parent's end, told to its children ---------


async def follow_up(rt: Runtime, state: ExecutionState) -> None:
    """After an execute call: an ended child resumes its parent; an ended parent cancels its
    children still running (those started with ``on_cancel="cancel"``)."""
    if not state.finished:
        return
    try:
        if state.parent is not None:
            crash.point("child_ended")  # ended, its parent not told yet
            await _tell_parent(rt, state)
        for child in _running_children(state):
            await _cancel(rt, child, f"parent {state.execution_id} ended {state.status}")
    except LoomError as exc:  # the redelivery of this execute call tries again
        log.warning("child flow follow-up of %s failed: %s", state.execution_id, exc)
        raise


def _running_children(state: ExecutionState) -> list[str]:
    return [
        c["child_id"]
        for c in state.children.values()
        if c.get("on_cancel") == "cancel"
        and resume_key(CHILD_GATE, c["child_id"]) not in state.resumes
    ]


async def _tell_parent(rt: Runtime, state: ExecutionState) -> None:
    """Tell the parent this child ended: through the parent's inbox where the store keeps
    one (one write of its own, and a wake its siblings share: ``loom.kernel.inbox``), else as a
    resume appended to the parent's log."""
    parent = state.parent or {}
    # In process (no dispatcher, or an inline one) the parent's own call is usually still
    # running its child: a resume reaches its live session at once, and there is no
    # network dispatch for an inbox's shared wake to save.
    in_process = rt.dispatcher is None or rt.dispatcher.inline
    if rt.store.inbox() is None or in_process:
        with contextlib.suppress(ExecutionFinishedError, UnknownExecutionError):
            await rt.resume(parent["execution_id"], CHILD_GATE, state.execution_id, None)
        return
    # The outcome is read here, from the child's own state (what ``check_child_resume``
    # reads for a resume): the inbox is written by the engine alone.
    result = await rt.report(state, include_state=False)
    outcome = {"status": state.status, "output": result.output, "error": state.error}
    parent_id = parent["execution_id"]
    stored, _ = await rt.payloads.encode(to_json_value(outcome), f"{parent_id}/resume")
    item = resume_item(CHILD_GATE, state.execution_id, stored, None, rt.clock())
    await post(rt, parent_id, item)


async def check_child_resume(
    rt: Runtime, parent: ExecutionState, child: str, payload: Any
) -> dict[str, Any]:
    """The resume check of ``loom.child``, whatever the route: the outcome recorded is read
    from the child's own log, never taken from the request, so nobody can forge a child's
    result; a child of another parent, or one still running, is refused.

    Raises:
        UnknownExecutionError: No such child.
        InputError: The execution is not a child of ``parent``, or has not ended.
    """
    state = await rt.load_state(child)
    if (state.parent or {}).get("execution_id") != parent.execution_id:
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
    s.children[e.step_id] = {"child_id": e.child_id, "flow": e.flow, "on_cancel": e.on_cancel}


def _child_step(s: ExecutionState, e: ev.ChildStarted) -> None:
    # A step record too, so an effect called where the log started a child diverges.
    s.steps[e.step_id] = {"effect": _child_step_effect(e.flow), "status": "child"}


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
    ) -> Any:
        """Run ``flow`` as a child execution and return its output (see :mod:`loom.primitives.children`);
        with ``queue``, the child runs within that queue's limits (:mod:`loom.primitives.queues`).

        Raises:
            ChildFlowFailedError: The child failed or was cancelled.
        """
        child = await self.start_flow(flow, input, on_cancel=on_cancel, queue=queue)
        return await child.result()

    async def start_flow(
        self,
        flow: str | Callable[..., Any],
        input: Any = None,
        *,
        on_cancel: str = "cancel",
        queue: QueueRef | None = None,
    ) -> ChildFlow:
        """Start ``flow`` as a child execution; await the returned handle for its output.

        ``on_cancel``: what this execution's end does to the child if it still runs,
        ``"cancel"`` it or ``"abandon"`` it. ``queue``: the declared queue (and partition
        key) the child runs on.
        """
        sid = next_step_id(self)
        return await start_flow(self._session, sid, flow, input, on_cancel, queue)


def _has_family(state: ExecutionState) -> bool:
    return state.parent is not None or bool(state.children)


PRIMITIVE = Primitive(
    "children",
    head={"ChildStarted": _child_started},
    step={"ChildStarted": _child_step},
    context=ChildrenContext,
    resume_checks={CHILD_GATE: check_child_resume},
    follow_up=follow_up,
    follows_up=_has_family,
)
