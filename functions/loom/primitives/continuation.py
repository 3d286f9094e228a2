"""Continue-as-new: ``ctx.continue_as_new(input)`` ends the run and starts a fresh one.

An entity flow that loops forever (take a message, update its state, repeat) would grow its
history, and with it every replay, without end. ``continue_as_new`` ends the current *run*
and starts the next run of the same execution with a new input and an empty history::

    @app.flow("counter")
    async def counter(ctx, total: int) -> None:
        for _ in range(100):
            total += await ctx.recv("add")
        await ctx.continue_as_new(total)

How it maps onto the log: one event, :class:`~loom.events.ExecutionContinued`, appended to
the execution's own log. The fold starts a fresh state there (run ``n + 1``: no steps, no
gates, the new input) and the runtime snapshots it, so loading and replaying the execution
reads the current run only, however many runs came before. Because the end of one run and
the start of the next are one append, a crash can neither lose the new run nor start it
twice; the execution stays ``running`` and is dispatched like any other. The execution id
stays the same, so resumes, messages, cancels and reads addressed to it reach the current
run. The chain is in the log: every ``ExecutionContinued`` names the run it starts
(``run_id``: ``"{execution_id}#run{n}"``).

Carried into the new run: messages the ended run did not take (in order, on the same
topics), resumes that arrived for gates it never opened, published values, the meter and
the budgets. Message ids the ended run received still deduplicate in the new run (a sender
retrying across the boundary is recognised); ids from runs before it are dropped, so what
is kept stays bounded.

Other tasks of the flow are abandoned where the continue finds them, as Temporal abandons
the activities still pending when a workflow continues as new. The rule reads only the log,
so a live run and any replay of it decide alike: the ended run is the events before
``ExecutionContinued``, and nothing after it belongs to that run. In the flow's terms:

* ``continue_as_new`` never waits for, and never fails on, a step still in flight in
  another task. A step whose outcome is in the log before the continue point stays in the
  ended run's history; a step whose outcome is not there is abandoned: its effect may have
  run (or may still be running when the call ends), its outcome is recorded nowhere and the
  next run does not see it. The same holds for a child start or a message send in flight
  (the child may exist, the message may have been delivered, the ended run records neither).
  Await what you need first.
* From the continue point on, the session appends nothing more: any write an abandoned
  step would make raises the continue signal in its task, and each ``ctx`` call raises it.
  When the call ends, the tasks still running are cancelled, as every session's are.

Because the ended run is never replayed again (loads and replays start at the last
``ExecutionContinued``) and a run that crashed before the continue point replays up to it
and continues again, a replay can never find a decision the live run took otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from loom import crash
from loom import events as ev
from loom.errors import LoomError, StoreError
from loom.kernel import cancellation
from loom.kernel.context import (
    AbortSignal,
    FlowContext,
    StopSignal,
    SupersededSignal,
    SuspendSignal,
    off_scope,
)
from loom.kernel.defs import to_json_value
from loom.kernel.execution_limits import exceeded
from loom.kernel.execution_limits import of_flow as limits_of
from loom.kernel.fold import ExecutionState, ResumeRecord, resume_key
from loom.kernel.primitive import Primitive
from loom.primitives import messages as msgs  # its names are read at call time (import cycle)

if TYPE_CHECKING:
    from loom.kernel.session import Session

__all__ = ["continue_as_new", "page_runs", "run_chain", "run_id"]

log = logging.getLogger("loom")


class _ContinueSignal(SuspendSignal):
    """The run ended by continuing as new: unwind; nothing more is appended by this call."""


def run_id(execution_id: str, run: int) -> str:
    """The id of run ``run`` of an execution (the first run is run 1)."""
    return f"{execution_id}#run{run}"


def run_chain(execution_id: str, events: Sequence[ev.Event]) -> list[dict[str, Any]]:
    """The runs in ``events`` (a whole log, in order): each run's id and its first and last
    seq, oldest first."""
    if not events:
        return []
    runs: list[dict[str, Any]] = [{"run": 1, "first_seq": events[0].seq}]
    for event in events:
        if isinstance(event, ev.ExecutionContinued):
            runs[-1]["last_seq"] = event.seq - 1
            runs.append({"run": event.run, "first_seq": event.seq})
    runs[-1]["last_seq"] = events[-1].seq
    return [{"run_id": run_id(execution_id, r["run"]), **r} for r in runs]


def page_runs(
    execution_id: str, events: Sequence[ev.Event], state: ExecutionState
) -> list[dict[str, Any]]:
    """:func:`run_chain` for a page of a log (``state`` is the execution's now): the runs
    its events belong to, numbered as the log numbers them. Empty when the page alone does
    not say which run its first event belongs to (no continue in it, before the current
    run)."""
    if not events:
        return []
    marks = [e for e in events if isinstance(e, ev.ExecutionContinued)]
    if marks:
        first = marks[0].run - 1
    elif events[0].seq >= state.run_started_seq:
        first = state.run
    else:
        return []
    runs: list[dict[str, Any]] = [{"run": first, "first_seq": events[0].seq}]
    for event in marks:
        runs[-1]["last_seq"] = event.seq - 1
        runs.append({"run": event.run, "first_seq": event.seq})
    runs[-1]["last_seq"] = events[-1].seq
    return [
        {"run_id": run_id(execution_id, r["run"]), **r}
        for r in runs
        if r["last_seq"] >= r["first_seq"]
    ]


# -- the fold -------------------------------------------------------------------------------


def _carried_messages(s: ExecutionState, consumed: dict[str, int]) -> list[tuple[str, str, Any]]:
    """``(topic, message_id, payload)`` of the messages the ended run did not take, in order."""
    by_slot = {slot: mid for mid, slot in s.message_ids.items() if slot}
    carried: list[tuple[str, str, Any]] = []
    for topic, filled in s.mailbox.items():
        for n in range(consumed.get(topic, 0) + 1, filled + 1):
            slot = msgs.slot_key(topic, n)
            got = s.resumes.get(resume_key(msgs.RECV, slot))
            if got is not None and not got["timed_out"] and slot in by_slot:
                carried.append((topic, by_slot[slot], got["payload"]))
    return carried


def _carried_resumes(s: ExecutionState) -> dict[str, ResumeRecord]:
    """Resumes for gates the ended run never opened (early ones: the next run may)."""
    opened = {resume_key(g["on"], g["correlation_key"]) for g in s.gates.values()}
    return {
        key: rec
        for key, rec in s.resumes.items()
        if key not in opened and not key.startswith(resume_key(msgs.RECV, ""))
    }


KEEP_MESSAGE_IDS: Final = 7 * 24 * 3600.0
"""Seconds a message id stays known after the run that received it ended: a sender's step
redelivering it later (its worker died between the delivery and its record, and it ran
again after the receiver continued as new, maybe several times) is refused as a repeat."""


def _keep_message_ids(s: ExecutionState, now: float) -> None:
    """Move the ended run's message ids to the kept ones and forget those kept longer than
    :data:`KEEP_MESSAGE_IDS` (decided by the continue's recorded time: every fold agrees)."""
    kept = {mid: at for mid, at in s.message_ids_kept.items() if at > now - KEEP_MESSAGE_IDS}
    for mid in s.message_ids:  # ("" slots: a snapshot's, from before ids were kept by time)
        kept[mid] = now
    s.message_ids_kept, s.message_ids = kept, {}


def _continued(s: ExecutionState, e: ev.ExecutionContinued) -> None:
    messages = _carried_messages(s, e.consumed)
    resumes: dict[str, ResumeRecord] = {
        k: {"payload": r["payload"], "timed_out": r["timed_out"], "seq": e.seq}
        for k, r in _carried_resumes(s).items()
    }
    _keep_message_ids(s, e.at)
    s.mailbox = {}
    for topic, mid, payload in messages:
        n = s.mailbox[topic] = s.mailbox.get(topic, 0) + 1
        resumes[resume_key(msgs.RECV, msgs.slot_key(topic, n))] = {
            "payload": payload,
            "timed_out": False,
            "seq": e.seq,
        }
        s.message_ids[mid] = msgs.slot_key(topic, n)
    s.resumes = resumes
    s.input, s.run, s.run_started_seq, s.started_at = e.input, e.run, e.seq, e.at
    s.status, s.claim, s.gates, s.patches, s.in_doubt = "running", None, {}, [], []
    s.parked_reason, s.output, s.error = None, None, None
    s._steps, s._decisions, s._raw_tail = {}, {}, None  # pyright: ignore[reportPrivateUsage]
    s._deferred = []  # pyright: ignore[reportPrivateUsage]
    s.children = {}  # the next run's steps start their own children (loom.primitives.children)
    cancellation.carry_over(s)


# -- the flow's side ------------------------------------------------------------------------


async def continue_as_new(session: Session, value: Any) -> NoReturn:
    """The session side of ``ctx.continue_as_new`` (see the module docstring).

    Raises:
        InvalidPayloadError: ``value`` does not fit the flow's input model.
    """
    await session.timers.landed()  # steps whose await was abandoned belong to this run
    _check_signal(session)
    _check_runs(session)
    await cancellation.checkpoint(session)  # a pending cancel arrives here, not in the next run
    parsed = to_json_value(session.flow.typed.parse_input(value))
    with off_scope():
        stored, _ = await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
            session.rt.payloads.encode(parsed, f"{session.execution_id}/input")
        )
    _check_signal(session)  # (a cancel or a failed store may have come meanwhile)
    # From here on no other step starts (each ctx call raises this signal), and after the
    # append this call appends nothing more: the log belongs to the next run.
    session.signal = _ContinueSignal()
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]  # no suspension meanwhile
    try:
        with off_scope():
            await _append_continued(session, stored)
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
    raise session.signal


def _check_runs(session: Session) -> None:
    """Fail the execution (``limit_exceeded``) instead of starting a run past ``max_runs``
    (:mod:`loom.kernel.execution_limits`): a flow that continues forever stops here."""
    state = session.state
    most = limits_of(session.rt.app, session.flow, state.budgets).value("max_runs")
    if state.run >= most:
        error = exceeded("max_runs", most, state.run, "continue_as_new refused")
        session._raise(StopSignal(error))  # pyright: ignore[reportPrivateUsage]


def _check_signal(session: Session) -> None:
    if session.signal is not None:
        raise session.signal


async def _append_continued(session: Session, stored: Any) -> None:
    consumed = dict(msgs._COUNTS.get(session, {}))  # pyright: ignore[reportPrivateUsage]
    event = ev.ExecutionContinued(run=session.state.run + 1, input=stored, consumed=consumed)
    try:
        await session.append([event])
    except (AbortSignal, SupersededSignal) as signal:  # the store failed, or we were overtaken
        session.signal = signal
        raise
    # The continue point: what an abandoned step of the ended run would append now raises
    # instead (set before anything else runs, so no outcome can slip in behind the event).
    session.journal.closed = session.signal
    crash.point("after_continue")  # the next run is in the log, not yet dispatched
    if not msgs.dry(session):
        await _start_next_run(session, event.seq)


async def _start_next_run(session: Session, seq: int) -> None:
    """Snapshot the fresh state (so loads skip the ended run) and dispatch the next run."""
    rt, eid = session.rt, session.execution_id
    try:
        await rt.save_snapshot(session.state)
    except StoreError:  # only a shortcut: the next load folds through the ended run instead
        log.warning("snapshot after continue_as_new of %s failed", eid, exc_info=True)
    try:
        await rt._dispatch(eid, session.flow.name, "manual", f"{eid}:{seq}:continued")  # pyright: ignore[reportPrivateUsage]
    except (StoreError, LoomError) as exc:  # the call fails; its redelivery runs the next run
        session.signal = AbortSignal(exc)


class ContinuationContext(FlowContext):
    """The ``ctx`` method of continue-as-new."""

    __slots__ = ()

    async def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run and start the next run of this execution with ``input`` and a fresh
        history; never returns (see :mod:`loom.primitives.continuation`)."""
        await continue_as_new(self._session, input)


PRIMITIVE = Primitive(
    "continuation", head={"ExecutionContinued": _continued}, context=ContinuationContext
)
