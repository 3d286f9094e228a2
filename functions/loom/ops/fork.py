"""Fork: a new execution that reuses an execution's recorded prefix and runs the rest anew.

``loom fork ID --from-step N`` (``Runtime.fork``, ``POST /executions/{id}/fork``) is for
recovering from a bug fixed after the fact: the new execution serves every step recorded
before step ``N`` from a copy of the original's log, and runs step ``N`` and everything after
it on the code deployed now (the flow's latest version unless one is named). The original is
never written to.

What "before step N" means. Step ids are positional (``"3"``, ``"2.1"``; a task's steps
carry its number as a prefix). The cut is the log position of the first event of step ``N``
or of any step inside it (``N.1``, ``N.2``…): every event recorded before that position is
reused, nothing after it. With concurrent branches, a sibling's outcome recorded after the cut
is not reused: that step runs again.

What the prefix keeps, event by event:

* effect outcomes, retries, ``ctx.now/uuid/random`` decisions, patch markers, gates and
  timers (``ExecutionSuspended``) and the resumes recorded before the cut, with their
  recorded times, so a gate's deadline is decided exactly as in the original. A gate open at
  the cut stays open in the fork with its recorded deadline (a timer already due fires at
  once); a resume that reached the original after the cut must be sent to the fork again;
* a step whose intent was recorded but whose outcome was not before the cut (it was running,
  retrying or backing off) is dropped, so it runs again from its first attempt;
* messages: a ``ctx.send`` recorded before the cut is served from the copy, never sent
  again (its receiver holds it once); the mailbox is carried as it stood at the cut (every
  message received before it, taken by a ``recv`` yet or not); a message that reached the
  original after the cut is not the fork's;
* published values (``ctx.set_event``) recorded before the cut are carried: the fork's
  ``get_event`` reads them at once, and its steps that set them are served from the copy;
* child flows started before the cut are reused, never started twice: one whose end came
  before the cut as recorded, one that ended since with its end copied in, one still running
  shared, its end told to the fork too; a child its parent's end cancelled (the original
  failed or was cancelled) is started anew (:mod:`loom.ops.fork_children`). The fork's end
  never cancels a child it shares;
* claims, parks and retries are the original's operations, not facts of the flow: dropped
  (a child's record of the forks sharing it, too);
* a correlation key that starts with the original's id and ``:`` (every ``ctx.sleep`` timer's,
  and a gate keyed as ``f"{ctx.execution_id}:…"``) is copied with the fork's id instead, as
  the flow asks for it when it replays under its new id. A gate keyed by the execution id
  in another shape parks the fork as nondeterministic at that gate: fork from before it;
* a value read from another execution (``ctx.get_event``) is the fork's as it was read, and
  a stream holds the values written before the cut (the fork writes the rest itself); an
  update accepted before the cut is refused (a caller's request: nobody would be answered).

What is refused (:class:`~loom.errors.NotForkableError`, nothing written): a step id the log
does not hold; a step in doubt at the cut (nobody knows whether its effect ran: give the
original a verdict first, or fork from that step); and any event this module does not know
how to reuse (a cancel, a continue-as-new, an update: fork from before it).

The fork is two writes: its ``ExecutionStarted`` (with ``forked_from``) and then, in one
append, the copied prefix closed by ``ExecutionForked``. Until the second lands the fork is
parked (``fork: …``) so no sweep runs it from scratch; repeating the same call with the same
new id completes it. A prefix one append of the store cannot carry (its
``max_append_events``, ``max_batch_bytes``) is refused before anything is written: fork
from an earlier step. Values the original stored as blobs are copied under the fork's id, so
purging the original never breaks the fork.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from loom import crash
from loom import events as ev
from loom.errors import AppendConflictError, ExecutionConflictError, NotForkableError
from loom.grants import recorded_by
from loom.ids import check_execution_id
from loom.kernel.defs import to_json_value
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.payloads import REF_KEY
from loom.kernel.primitive import Primitive, check_outside_id
from loom.ops import fork_children
from loom.primitives.child_sharing import reconnect
from loom.reserved_ids import IdForm
from loom.store.base import AppendRequest, StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

FORK_PARK: Final = "fork"

# Events that take a step id: where a step first shows in the log.
_STEP_TYPES: Final = frozenset(
    {
        "EffectStarted",
        "EffectCompleted",
        "EffectFailed",
        "EffectRetried",
        "DecisionRecorded",
        "ExecutionSuspended",
        "EffectInDoubt",
        "EffectVerdict",
    }
)
# Steps of the primitives: a child start, a cancel through a child's handle, a message
# sent, a value published, a read of another execution's value, a stream's values (the
# module docstring says how each is reused).
_PRIMITIVE_STEPS: Final = frozenset(
    {
        "ChildStarted",
        "ChildCancelRequested",
        "MessageSent",
        "EventPublished",
        "EventAwaited",
        "EventRead",
        "StreamWritten",
        "StreamClosed",
    }
)
_COPIED: Final = _STEP_TYPES | _PRIMITIVE_STEPS | {"PatchRecorded", "ExecutionResumed", "MessageReceived"}  # fmt: skip
_CUT_AT: Final = _STEP_TYPES | _PRIMITIVE_STEPS
# The original's operations, not facts of the flow (a fork's own marker included: a fork
# of a fork copies its copied events like any others; a child's record of the forks that
# share it: a fork of the child is no one's child).
_DROPPED: Final = frozenset(
    {
        "ExecutionClaimed",
        "ExecutionDequeued",  # (a fork is admitted by its queue again: its own deadline)
        "ExecutionParked",
        "ExecutionRetried",
        "ExecutionForked",
        "ChildShared",
    }
)
_UNSETTLED: Final = frozenset({"started", "retrying", "backoff"})


def _in_step(step_id: str | None, step: str) -> bool:
    return step_id is not None and (step_id == step or step_id.startswith(f"{step}."))


def cut_seq(events: Sequence[ev.Event], step: str, execution_id: str = "?") -> int:
    """The seq of the first event of ``step`` (or of a step inside it).

    Raises:
        NotForkableError: The log holds no such step.
    """
    for event in events:
        if event.type in _CUT_AT and _in_step(getattr(event, "step_id", None), step):
            return event.seq
    steps = recorded_steps(events)
    shown = ", ".join(steps[:20]) + (", …" if len(steps) > 20 else "")
    raise NotForkableError(
        f"execution {execution_id!r} has no step {step!r}; its recorded steps: {shown or 'none'}",
        details={"step_id": step, "recorded_steps": steps[:100]},
    )


def recorded_steps(events: Sequence[ev.Event]) -> list[str]:
    """The step ids a fork of ``events`` (a whole log) may run again from, in log order."""
    seen: dict[str, None] = {}
    for event in events:
        if event.type in _CUT_AT:
            seen.setdefault(str(getattr(event, "step_id", "")), None)
    return list(seen)


def prefix(events: Sequence[ev.Event], cut: int, step: str) -> list[ev.Event]:
    """The events of ``events`` a fork cut at ``cut`` reuses (see the module docstring).

    Raises:
        NotForkableError: A step is in doubt at the cut, or an event cannot be reused.
    """
    kept: list[ev.Event] = []
    for event in events[1:]:
        if event.seq >= cut:
            break
        if event.type in _DROPPED:
            continue
        if event.type not in _COPIED:
            raise NotForkableError(
                f"the log holds {event.type} at #{event.seq}, before step {step!r}, which a "
                "fork cannot reuse; fork from an earlier step",
                details={"event": event.type, "seq": event.seq, "step_id": step},
            )
        kept.append(event)
    state = fold([events[0], *kept])
    if state.in_doubt:
        raise NotForkableError(
            f"step {state.in_doubt[0]!r} is in doubt before step {step!r}: nobody knows "
            "whether its effect ran; give the original a verdict first, or fork from that step",
            details={"step_id": step, "in_doubt": list(state.in_doubt)},
        )
    rerun = {sid for sid, rec in state.steps.items() if rec.get("status") in _UNSETTLED}
    return [e for e in kept if getattr(e, "step_id", None) not in rerun or _is_patch(e)]


def _is_patch(event: ev.Event) -> bool:
    return event.type == "PatchRecorded"


async def fork(
    runtime: Runtime,
    execution_id: str,
    from_step: str | None = None,
    *,
    from_seq: int | None = None,
    new_id: str | None = None,
    by: str | None = None,
    note: str | None = None,
    version: str | int | None = None,
    run: bool = True,
    capabilities: Iterable[str] = (),
    derived: IdForm | None = None,
) -> ExecutionResult:
    """Start a new execution from ``execution_id``'s log before ``from_step``.

    ``from_seq`` cuts at a log position instead (what re-driving a failed execution uses:
    the position of its failure). Idempotent by ``new_id`` (default: a new id).

    The fork holds the original's capabilities plus ``capabilities`` (an execution that
    failed for want of one is re-run with it). ``by`` is the principal who forks: the grant
    policy must let ``by`` grant all of them to the flow (``None``: the process's own code,
    trusted). ``note`` (free text from the request, e.g. an operator's name) is recorded
    beside ``by`` and authorizes nothing (:func:`loom.grants.recorded_by`). ``derived`` is
    for the engine alone: the reserved form (:mod:`loom.reserved_ids`) of ``new_id``.

    Raises:
        UnknownExecutionError: No such execution.
        NotForkableError: See the module docstring.
        ExecutionConflictError: ``new_id`` exists and is not this fork.
        ReservedExecutionIdError: ``new_id`` has a form the engine derives.
        NotPermittedError: ``by`` may not grant the fork's capabilities.
        UnknownFlowError: The flow (or ``version``) is not in the deployed code.
    """
    await runtime.require(execution_id)
    events = await runtime.store.read(execution_id)
    cut, step = _resolve_cut(events, from_step, from_seq, execution_id)
    kept = prefix(events, cut, step)
    first = events[0]
    assert isinstance(first, ev.ExecutionStarted)
    eid = (
        check_outside_id(check_execution_id(new_id), derived=derived)
        if new_id is not None
        else str(uuid.uuid4())
    )
    if eid == execution_id:
        raise ExecutionConflictError(
            "a fork needs a new execution id, not the original's", details={"execution_id": eid}
        )
    defn = runtime.app.get_flow(first.flow, version)
    held = sorted({*first.capabilities, *capabilities})
    if by is not None:
        runtime.grants.check(by, first.flow, held)
    value = await runtime.payloads.decode(first.input, execution_id)
    stored, _ = await runtime.payloads.encode(
        to_json_value(defn.typed.parse_input(value)), f"{eid}/input"
    )
    children = await fork_children.plan(runtime, kept)  # (reads the children it started)
    kept = fork_children.without(kept, children.restart)
    origin = ev.ForkOrigin(execution_id=execution_id, step_id=step, seq=cut)
    started = ev.ExecutionStarted(
        execution_id=eid,
        flow=first.flow,
        input=stored,
        flow_version=defn.version,
        capabilities=held if capabilities else list(first.capabilities),
        budgets=dict(first.budgets),
        at=runtime.clock(),
        by=recorded_by(by, note),
        forked_from=origin,
        queue=first.queue,  # a fork runs on its origin's queue, with its partition key
        partition_key=first.partition_key,
        # its priority and timeout from dequeue, not its delay nor its deduplication id
        queue_options={
            k: v for k, v in (first.queue_options or {}).items() if k in ("priority", "timeout")
        }
        or None,
        step_numbering=first.step_numbering,  # the copied prefix is numbered the origin's way
    )
    ended = await fork_children.ends(runtime, eid, children)
    _check_fits(runtime, [*kept, *ended], eid, execution_id)
    created, stored_first = await runtime.store.create(started)
    if not created and stored_first.forked_from != origin:
        raise ExecutionConflictError(
            f"execution {eid!r} exists and is not a fork of {execution_id!r} at step {step!r}; "
            "use a new execution id",
            details={"execution_id": eid},
        )
    crash.point("fork_created")  # parked until the copy lands: a repeat completes it
    copied = await _copy(runtime, execution_id, eid, kept, ended)
    crash.point("fork_copied")  # shared children not told of the fork yet: a repeat does it
    await reconnect(runtime, eid)  # the children it shares tell it their ends
    if not copied:
        return await runtime.result(eid)  # an earlier call completed this fork
    ran = await runtime._dispatch(eid, first.flow, "start", f"{eid}:fork") if run else None  # pyright: ignore[reportPrivateUsage]
    return ran or await runtime.result(eid)


def _resolve_cut(
    events: Sequence[ev.Event], from_step: str | None, from_seq: int | None, execution_id: str
) -> tuple[int, str]:
    if (from_step is None) == (from_seq is None):
        raise NotForkableError("give exactly one of from_step and from_seq")
    if from_step is not None:
        return cut_seq(events, from_step, execution_id), from_step
    assert from_seq is not None
    if not 2 <= from_seq <= events[-1].seq:
        raise NotForkableError(
            f"from_seq must be between 2 and {events[-1].seq}, the log's last seq; not {from_seq}",
            details={"from_seq": from_seq},
        )
    at = next(e for e in events if e.seq == from_seq)
    return from_seq, getattr(at, "step_id", None) or f"#{from_seq}"


def _check_fits(runtime: Runtime, kept: Sequence[ev.Event], eid: str, source: str) -> None:
    """Refuse, before anything is written, a prefix one append of the store cannot carry:
    the copy is one append so that no execute ever sees a fork half-copied."""
    store, count = runtime.store, len(kept) + 1  # + ExecutionForked
    grow = max(0, len(eid) - len(source))  # the id moves into correlation keys and blob refs
    size = sum(len(ev.event_to_json(e)) + 2 * grow for e in kept) + 256
    most, limit = store.max_append_events, store.max_batch_bytes
    if (most is None or count <= most) and (limit is None or size <= limit):
        return
    raise NotForkableError(
        f"the prefix to copy is {count} events, about {size} bytes: more than one append of "
        f"this store carries (at most {most or 'any number of'} events, "
        f"{limit or 'any number of'} bytes); fork from an earlier step",
        details={"events": count, "bytes": size, "max_events": most, "max_bytes": limit},
    )


async def _copy(
    runtime: Runtime, source: str, eid: str, kept: list[ev.Event], ended: list[ev.Event]
) -> bool:
    """Append the copied prefix, the children's ends copied in, and ``ExecutionForked`` at
    seq 2; False if already there."""
    if (await runtime.store.summary(eid)).last_seq > 1:
        return False
    batch: list[ev.Event] = []
    for seq, event in enumerate(kept, start=2):
        batch.append(await _rehome(runtime, event, source, eid, seq))
    closing = ev.ExecutionForked(copied=len(kept))
    ev.number([*ended, closing], len(kept) + 1, runtime.clock())
    batch.extend([*ended, closing])
    try:
        await runtime.store.append(AppendRequest(eid, 1, batch, StatusChange("running")))
    except AppendConflictError:
        return False  # a concurrent call with the same id copied it first
    return True


_VALUE_FIELDS: Final = {
    "EffectCompleted": "output",
    "EffectVerdict": "output",
    "ExecutionResumed": "payload",
    "MessageReceived": "payload",
    "EventPublished": "value",
}


async def _rehome(runtime: Runtime, event: ev.Event, source: str, eid: str, seq: int) -> ev.Event:
    """A copy of ``event`` at ``seq`` (recorded time kept), its blob moved to ``eid``'s."""
    update: dict[str, Any] = {"seq": seq}
    key: str | None = getattr(event, "correlation_key", None)
    if key is not None and key.startswith(f"{source}:"):  # a timer's, or keyed by the id
        update["correlation_key"] = f"{eid}:{key[len(source) + 1 :]}"
    name = _VALUE_FIELDS.get(event.type)
    value = getattr(event, name) if name else None
    if name and isinstance(value, dict) and REF_KEY in value and len(value) == 1:  # pyright: ignore[reportUnknownArgumentType]
        plain = await runtime.payloads.decode(value, source)
        where = getattr(event, "step_id", None) or event.type
        update[name], _ = await runtime.payloads.encode(plain, f"{eid}/{where}/{name}")
    return event.model_copy(update=update)


# -- fold handlers ---------------------------------------------------------------------------


def _started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    # (After the kernel's own handler: ``loom.kernel.fold.register`` chains them.)
    if e.forked_from is not None:  # parked until its prefix is copied: never run from scratch
        origin = e.forked_from
        s.status = "suspended"
        s.parked_reason = (
            f"{FORK_PARK}: copying the prefix of {origin.execution_id!r} before step "
            f"{origin.step_id!r}; repeat the fork with this id to complete it"
        )


def _forked(s: ExecutionState, e: ev.ExecutionForked) -> None:
    s.status, s.parked_reason, s.claim = "running", None, None


PRIMITIVE = Primitive("fork", head={"ExecutionStarted": _started, "ExecutionForked": _forked})
