"""How a parent starts a child (:mod:`loom.primitives.children`): the start's options, the
flow they name, the id they give, and a replay's check that the code still names the child
the log holds; and the failure of a start whose id is taken (``ChildIdTakenError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from loom import events as ev
from loom.errors import ChildIdTakenError, LimitExceededError, UnknownFlowError
from loom.ids import check_execution_id
from loom.kernel import primitive
from loom.kernel.defs import FlowDef
from loom.kernel.divergence import visit
from loom.kernel.fold import StepRecord
from loom.kernel.timeouts import deadline_for
from loom.primitives import queues
from loom.primitives.child_ids import child_id
from loom.primitives.child_sharing import SHARED

if TYPE_CHECKING:
    from loom.kernel.session import Session
    from loom.primitives.queues import QueueRef


@dataclass(frozen=True, slots=True)
class ChildOptions:
    """How ``ctx.start_flow`` starts a child (see the module docstring).

    Attributes:
        on_cancel: What the parent's end does to the child still running: ``"cancel"`` it
            or ``"abandon"`` it.
        queue: The declared queue (and partition key) the child runs on.
        execution_id: The child's id, instead of the one derived from the parent's.
        timeout: The child's execution timeout (default: its flow's).
        version: The flow version the child runs on (default: the latest registered).
    """

    on_cancel: str = "cancel"
    queue: QueueRef | None = None
    execution_id: str | None = None
    timeout: float | timedelta | None = None
    version: str | int | None = None


def child_step_effect(flow: str) -> str:
    """The ``effect`` of a child start's step record (``ChildStarted``, or its failure)."""
    return f"loom.child:{flow}"


def flow_def(
    session: Session, flow: str | Callable[..., Any], version: str | int | None
) -> FlowDef:
    """The flow to start: by name, or by function (the version registered with it, unless
    ``version`` names one).

    Raises:
        UnknownFlowError: No such flow (``UnknownFlowVersionError``: no such version).
    """
    app = session.rt.app
    if isinstance(flow, str):
        return app.get_flow(flow, version)
    for known in app.versions.values():
        for defn in known.values():
            if defn.fn is flow:
                return defn if version is None else app.get_flow(defn.name, version)
    raise UnknownFlowError(f"{flow!r} is not a flow registered on this app")


def recorded_def(
    session: Session, flow: str | Callable[..., Any], options: ChildOptions
) -> FlowDef:
    """The flow of a child the log holds, for typing its output: the version asked for if
    this deployment has it, else the latest (the child runs where its version is)."""
    try:
        return flow_def(session, flow, options.version)
    except UnknownFlowError:
        if options.version is None:
            raise
        return flow_def(session, flow, None)


def live_id(session: Session, step_id: str, defn: FlowDef, options: ChildOptions) -> str:
    """The id of a child started now (the options checked before anything is written).

    Raises:
        InvalidExecutionIdError: An explicit id breaks the id rule
            (``ReservedExecutionIdError``: it has a form the engine derives).
        InvalidPayloadError: The timeout is not a positive number of seconds.
        InputError: The queue is not declared.
    """
    deadline_for(defn, options.timeout, 0.0)  # (checks the timeout: the deadline comes later)
    queues.started_fields(session.rt.app, options.queue)
    if options.execution_id is None:
        return child_id(session.execution_id, step_id, session.state.run)
    return primitive.check_outside_id(check_execution_id(options.execution_id))


def check_recorded_id(
    session: Session, step_id: str, recorded: dict[str, str], explicit: str | None
) -> None:
    """Park when the code names the recorded child otherwise than the log does (a child a
    fork shares keeps its recorded id: see :mod:`loom.primitives.child_sharing`)."""
    if recorded.get(SHARED):
        return
    was = recorded["child_id"] if recorded.get("explicit") else None
    if was == explicit:
        return
    had = f"child {recorded['child_id']!r} under " + ("its explicit id" if was else "a derived id")
    asks = f"the explicit id {explicit!r}" if explicit else "no explicit id"
    session._park(step_id, f"step {step_id}: log started {had}, flow gives {asks}")  # pyright: ignore[reportPrivateUsage]


async def recorded_failure(
    session: Session, step_id: str, defn: FlowDef, rec: StepRecord
) -> NoReturn:
    """Raise the recorded failure of the child start at ``step_id`` (parks on another step)."""
    if rec.get("effect") != child_step_effect(defn.name) or rec.get("status") != "failed":
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


def taken(cid: str, holder: ev.ExecutionStarted) -> ChildIdTakenError:
    parent = (holder.parent or {}).get("execution_id")
    dumped = {"cid": json.dumps(cid), "flow": json.dumps(holder.flow)}
    message = _TAKEN.format(**dumped, parent=json.dumps(parent))
    return ChildIdTakenError(message, child_id=cid, holder_flow=holder.flow, holder_parent=parent)


def _taken_from(message: str) -> ChildIdTakenError:
    found = _TAKEN_RE.match(message)
    cid, flow, parent = (json.loads(g) for g in found.groups()) if found else ("", "", None)
    return ChildIdTakenError(message, child_id=cid, holder_flow=flow, holder_parent=parent)


async def record_taken(
    session: Session, step_id: str, cid: str, defn: FlowDef, holder: ev.ExecutionStarted
) -> ChildIdTakenError:
    """Record the child start at ``step_id`` as failed (the id is taken); the error."""
    error = taken(cid, holder)
    info = ev.ErrorInfo(code=error.code, type=type(error).__name__, message=error.message)
    failed = ev.EffectFailed(step_id=step_id, effect=child_step_effect(defn.name), error=info)
    await session.append([failed])
    return error
