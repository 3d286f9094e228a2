"""A repeated start: the same execution id asked for again (at-least-once start).

A start appends ``ExecutionStarted`` and then dispatches the execution. A process that dies
between the two, or a dispatch that fails, leaves an execution nobody runs; the caller (a
client retrying, Pub/Sub redelivering, Cloud Tasks retrying a 503) then asks again. So a
repeat with the same flow and input dispatches an execution whose log is still its start
alone, under the first start's dispatch id (a dispatcher that already holds that id treats
it as done). A repeat with another flow or input is refused; one that finds the execution
under way or ended only reports where it stands.

A start that runs the execution at once, in this process (no dispatcher), writes its first
claim with the create (:func:`start_here`): one write and no load less per execution, as
DBOS's executor id rides its workflow row. If that process dies before anything else is
written, the claim's holder is dead: a repeat finds the start and a claim that is no longer
live, and runs it (:func:`never_ran`); on another machine the claim lasts its lease first,
as any crashed worker's does.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loom import crash
from loom import events as ev
from loom.errors import (
    ExecutionConflictError,
    ExecutionSupersededError,
    ReservedExecutionIdError,
)
from loom.kernel.claims import ACTIVE_HOLDERS, claim_is_live, new_holder
from loom.kernel.context import LapsedSignal, SupersededSignal
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.follow_up import follow_up, has_follow_up
from loom.kernel.inbox import after_call, reported_after
from loom.kernel.payloads import canonical_json
from loom.wire import ExecutionPackage, ExecutionResult, known_valid

if TYPE_CHECKING:
    from loom.kernel.defs import FlowDef
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session


# The ids the starts of this task created, for a caller that must tell its own create from
# a racing start's (a schedule pass, ``loom.primitives.schedules``); ``None``: nobody asks.
_CREATED: ContextVar[set[str] | None] = ContextVar("loom_created", default=None)


@contextmanager
def noting_creates() -> Generator[set[str]]:
    """Collect the ids that ``Runtime.start`` calls inside the block created (a start that
    found its id taken, by a repeat or a racing start, adds nothing)."""
    created: set[str] = set()
    token = _CREATED.set(created)
    try:
        yield created
    finally:
        _CREATED.reset(token)


def note_created(execution_id: str) -> None:
    """Tell :func:`noting_creates` (if anyone is) that this start created ``execution_id``."""
    seen = _CREATED.get()
    if seen is not None:
        seen.add(execution_id)


def check_same_start(
    first: ev.ExecutionStarted, started: ev.ExecutionStarted, *, own: bool = False
) -> None:
    """Refuse a repeated start that differs from the stored one.

    With ``own`` (the id is one the engine derived, :mod:`loom.reserved_ids`), the stored
    start must also be by the same principal and no child or fork: else it is not the
    engine's execution but one that took its id.

    Raises:
        ExecutionConflictError: Another flow, input, capabilities or budgets.
        ReservedExecutionIdError: ``own``, and another principal's execution holds the id.
    """
    if own and (first.by, first.parent, first.forked_from) != (started.by, None, None):
        raise ReservedExecutionIdError(
            f"execution {started.execution_id!r} holds an id the engine derives, and the "
            "engine did not start it; nothing was started",
            details={"execution_id": started.execution_id},
        )
    mine = (started.flow, started.capabilities, started.budgets)
    theirs = (first.flow, first.capabilities, first.budgets)
    # Inputs as exact JSON: Python's ``1 == 1.0 == True`` took another input for this one.
    if mine != theirs or canonical_json(started.input) != canonical_json(first.input):
        # The stored flow is not named: the caller may not be allowed to read that
        # execution, and the id alone says what conflicts.
        raise ExecutionConflictError(
            f"execution {started.execution_id!r} exists with another flow or input; use a "
            "new execution id",
            details={"execution_id": started.execution_id},
        )


def never_ran(state: ExecutionState, now: float) -> bool:
    """Whether the execution was created and never got past its claim: the log holds the
    start alone, or the start and a claim that is no longer live (a start that claimed with
    its create, or a worker, died before anything else was written)."""
    if state.status != "running":
        return False
    if state.last_seq == 1:
        return True
    return state.last_seq == 2 and state.claim is not None and not claim_is_live(state.claim, now)


def runs_here(rt: Runtime, started: ev.ExecutionStarted) -> bool:
    """Whether a start may claim the execution with its create and run it at once: it runs
    inline (no dispatcher), on no queue (a queue admits it first), before any deadline."""
    if rt.dispatcher is not None or started.queue is not None:
        return False
    return started.deadline is None or started.deadline > rt.clock()


async def start_here(
    rt: Runtime, started: ev.ExecutionStarted, flow: FlowDef
) -> ExecutionResult | ev.ExecutionStarted:
    """Create the execution already claimed by this process, and run it.

    The claim rides the create (one write, no load): nobody can have seen the execution
    before it, so it is as fenced as a claim appended after it. When the id exists (a
    repeat), nothing was written and the stored first event is returned instead.
    """
    eid, holder, now = started.execution_id, new_holder(), rt.clock()
    claimed = first_claim(holder, now, now + rt.claim_ttl)
    ACTIVE_HOLDERS.add(holder)  # live for this process's other tasks from the first moment
    try:
        created, first = await rt.store.create(started, [claimed])
        if not created:
            return first
        note_created(eid)
        if crash.ARMED:  # (a call less where no crash point is configured)
            crash.point("after_start")
        state = fold([first, claimed])
        # (The id was checked, and the store took it: the package needs no validation.)
        fields = {
            "execution_id": eid,
            "flow": flow.name,
            "reason": "start",
            "dispatch_id": f"{eid}:1",
        }
        package = known_valid(ExecutionPackage, fields)
        _HANDED[id(package)] = Claimed(state, flow, holder)
        try:  # through ``execute``: its tracing, a subclass's checks
            result = await rt.execute(package)
        except ExecutionSupersededError:  # overtaken: report where the winner got to
            result = await rt.report(await rt.load_state(eid))
        finally:
            _HANDED.pop(id(package), None)
    finally:
        ACTIVE_HOLDERS.discard(holder)
        woke = await after_call(rt, holder, flow.name)  # an inbox wake that found it running
    return await reported_after(rt, result, woke)


def first_claim(holder: str, now: float, until: float) -> ev.ExecutionClaimed:
    """``ExecutionClaimed(holder=holder, until=until, seq=2, at=now)``, the claim a create
    carries, built unvalidated (``ev.unvalidated``): its values are the engine's own, and
    validation costs more than the rest of building it; the floats as validation makes them.
    """
    values = {
        "schema_version": ev.SCHEMA_VERSION,
        "seq": 2,
        "at": float(now),
        "type": "ExecutionClaimed",
        "holder": holder,
        "until": float(until),
    }
    return ev.unvalidated(ev.ExecutionClaimed, values, {"holder", "until", "seq", "at"})


def started_event(fields: dict[str, Any]) -> ev.ExecutionStarted:
    """``ExecutionStarted(**fields)``, the event a start writes first.

    Built unvalidated (``ev.unvalidated``) when every value already is what validation
    would make of it: the start checked the id, found the flow, encoded the input (an
    ``Any`` field, kept as it is either way) and built the fresh containers; a caller's
    own values (capabilities, budgets, who asked, a queue, an int from a clock) are
    checked for their exact types here, and anything else takes the validated way. Most
    starts are the process's own, with none of them: validation cost more than the rest
    of building the event.
    """
    at, caps, by, deadline = fields["at"], fields["capabilities"], fields["by"], fields["deadline"]
    numbering = fields.get("step_numbering")
    if (
        type(at) is not float
        or fields["budgets"]  # (floats validation makes of ints: the validated way)
        or type(fields["execution_id"]) is not str
        or type(fields["flow"]) is not str
        or type(fields["flow_version"]) is not str
        or (by is not None and type(by) is not str)
        or (deadline is not None and type(deadline) is not float)
        or (caps and not all(type(c) is str for c in caps))
        or ("queue" in fields and not _queue_fields(fields))
        or fields.get("queue_options")  # (a queue's options: the validated way)
        or (numbering is not None and type(numbering) is not int)
    ):
        return ev.ExecutionStarted(**fields)
    values = {
        "schema_version": ev.SCHEMA_VERSION,
        "seq": 0,
        "at": at,
        "type": "ExecutionStarted",
        "execution_id": fields["execution_id"],
        "flow": fields["flow"],
        "input": fields["input"],
        "flow_version": fields["flow_version"],
        "capabilities": caps,
        "budgets": fields["budgets"],
        "by": by,
        "deadline": deadline,
        "parent": None,
        "forked_from": None,
        "queue": fields.get("queue"),
        "partition_key": fields.get("partition_key"),
        "queue_options": None,
        "step_numbering": numbering,
    }
    return ev.unvalidated(ev.ExecutionStarted, values, set(fields))


def _queue_fields(fields: dict[str, Any]) -> bool:
    """Whether a start's queue fields are of the types validation keeps as they are."""
    key = fields.get("partition_key")
    return type(fields["queue"]) is str and (key is None or type(key) is str)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A new execution claimed with its create, for the ``execute`` that runs it."""

    state: ExecutionState
    flow: FlowDef
    holder: str


# What a start hands to the ``execute`` it makes in-process, by the id of the package it
# passes (alive for the whole call, so the id names no other package meanwhile). Not a
# private attribute of the package: pydantic initializes those on every package built, at
# twice the cost of the package itself.
_HANDED: dict[int, Claimed] = {}


def run_handed(
    rt: Runtime, package: ExecutionPackage
) -> Coroutine[Any, Any, ExecutionResult] | None:
    """The run of the execution a start claimed with its create and hands with ``package``
    (the ``execute`` of it: no load, no claim); ``None`` for any other package."""
    claimed = _HANDED.pop(id(package), None) if _HANDED else None
    if claimed is None:
        return None
    from loom.kernel.session import Session  # the session imports the runtime's modules

    return run_session(rt, Session(rt, claimed.state, claimed.flow, claimed.holder), 0)


async def run_session(rt: Runtime, session: Session, tail: int) -> ExecutionResult:
    """Run a claimed session's flow until it blocks, and report where it stands.

    Args:
        rt: The runtime.
        session: The session, its claim made (:func:`loom.kernel.durability.claim`).
        tail: Events after the last snapshot when the state was loaded.

    Raises:
        ExecutionSupersededError: Another writer overtook the session.
        LapsedSignal: The call's admission lapsed; its claim was given back.
    """
    # (The caller keeps the holder in ``ACTIVE_HOLDERS`` from its claim to its reply.)
    session.journal.since_snapshot = tail
    await session.run()
    signal, state, since_snapshot = (
        session.signal,
        session.journal.state,
        session.journal.since_snapshot,
    )
    settled = let_go(session)  # (freed: nothing else holds the state any more)
    if isinstance(signal, LapsedSignal):  # the caller, who admitted it, lets it wait again
        raise signal
    if isinstance(signal, SupersededSignal):
        raise ExecutionSupersededError(
            f"execution {state.execution_id!r} was overtaken by another writer"
        )
    if state.status != "running" and since_snapshot >= rt.snapshot_min_tail:
        await rt.save_snapshot(state)
    # A timer already due (``ctx.sleep(0)``, a zero timeout) runs inline with no dispatcher:
    # report where that got to, not the suspension it left behind.
    ran = await follow_up(rt, state) if has_follow_up(state) else None
    if crash.ARMED:
        crash.point("before_reply")
    if ran is None and state.status == "running":  # it continued as new: the next run may
        return await rt.result(state.execution_id)  # have run here already (no dispatcher)
    return ran or await rt.report(state, settled=settled)


def let_go(session: Session) -> bool:
    """Free an ended session now rather than at some later garbage collection; True if so.

    Its parts point back at it (the journal and the loop timers hold the session, the
    ordering its bound method, the flow's tasks its scope): some 26 objects per execute
    call in reference cycles that only the collector frees, and the more a busy process
    leaves to it, the more often and the longer it collects. Emptying the session breaks
    them all. Only when nothing of the session can run any more: its tasks (the flow's,
    the watcher, the ordering's driver) are done and no detached step is still unwinding;
    a task that outlived its reaping keeps the session whole, and the collector frees it.
    Nothing reads the session afterwards (the caller took what it needs).
    """
    if session.timers.busy:
        return False
    for task in [*session._tasks, session._watcher, session.order.driver]:  # pyright: ignore[reportPrivateUsage]
        if task is not None and not task.done():
            return False
    session.__dict__.clear()
    return True
