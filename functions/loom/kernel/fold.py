"""The fold: ``ExecutionState`` is a pure function of the event log.

``fold(events)`` reads nothing but its arguments: no clock, no I/O, no randomness. The same
events always give the same state, which is why a snapshot can stand in for a log prefix.

``evolve`` applies one event in place and is what the runtime calls per append, so a step costs
O(1) state work however long the history is. State values are plain JSON-able dicts, so a
snapshot is one ``json.dumps`` away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from loom import events as ev
from loom.errors import ConfigurationError
from loom.kernel.state import (
    STEP_HANDLERS,
    ExecutionState,
    GateRecord,
    Meter,
    ResumeRecord,
    StepRecord,
    resume_key,
)

# The state and its records live in ``loom.kernel.state``; importing them from here goes on working.
__all__ = [
    "ExecutionState",
    "GateRecord",
    "Meter",
    "ResumeRecord",
    "StepRecord",
    "evolve",
    "fold",
    "resume_key",
]


def _started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    s.execution_id, s.flow, s.input = e.execution_id, e.flow, e.input
    s.flow_version, s.capabilities, s.budgets = e.flow_version, list(e.capabilities), e.budgets
    s.status, s.started_at, s.deadline, s.parent = "running", e.at, e.deadline, e.parent
    s.step_numbering = e.step_numbering


def _claimed(s: ExecutionState, e: ev.ExecutionClaimed) -> None:
    if s.claim is None or s.claim["holder"] != e.holder:  # an extension is the same call
        s.idle_claims += 1
    s.claim = {"holder": e.holder, "until": e.until}
    if not s.finished and not s.in_doubt:
        s.status = "running"


# Step handlers touch only ``steps``/``decisions``; they are deferred while a snapshot's step
# records are still unparsed, so a resume never parses a long history.


def _effect_started(s: ExecutionState, e: ev.EffectStarted) -> None:
    prior = s.steps.get(e.step_id)
    s.steps[e.step_id] = {
        "effect": e.effect,
        "status": "started",
        "attempt": e.attempt,
        "started_at": e.at,
        "idempotency_key": e.idempotency_key,
    }
    if prior is not None and "voided" in prior:  # a later attempt after a not_performed
        s.steps[e.step_id]["voided"] = prior["voided"]


def _effect_completed(s: ExecutionState, e: ev.EffectCompleted) -> None:
    # (The records themselves where they are loaded: the property's call, on every step.)
    steps, step_id = s._steps or s.steps, e.step_id  # pyright: ignore[reportPrivateUsage]
    prior = steps.get(step_id)
    attempt = prior.get("attempt", 1) if prior else 1
    steps[step_id] = {
        "effect": e.effect,
        "status": "completed",
        "output": e.output,
        "attempt": attempt,
        "seq": e.seq,
    }


def _effect_failed(s: ExecutionState, e: ev.EffectFailed) -> None:
    s.steps[e.step_id] = {
        "effect": e.effect,
        "status": "failed",
        "error": e.error.model_dump(),
        "seq": e.seq,
    }


def _retried(s: ExecutionState, e: ev.EffectRetried) -> None:
    rec = s.steps.setdefault(e.step_id, {"effect": e.effect})
    rec["attempt"] = e.attempt
    if e.not_before is not None:  # the last attempt's failure is known: nothing is in doubt
        rec.update(status="backoff", not_before=e.not_before)
    elif rec.get("status") != "started":  # a non-idempotent step stays in its intent state
        rec["status"] = "retrying"


def _decision(s: ExecutionState, e: ev.DecisionRecorded) -> None:
    s.decisions[e.step_id] = {"kind": e.kind, "value": e.value}


def _in_doubt_step(s: ExecutionState, e: ev.EffectInDoubt) -> None:
    rec = s.steps.setdefault(e.step_id, {"effect": e.effect})
    rec["status"] = "in_doubt"
    rec["episode"] = e.seq


def _verdict_step(s: ExecutionState, e: ev.EffectVerdict) -> None:
    rec = s.steps.setdefault(e.step_id, {})
    rec["verdict_by"] = e.by
    rec["seq"] = e.seq
    if e.verdict == "performed":
        rec.update(status="completed", output=e.output)
    elif e.verdict == "failed":
        rec.update(status="failed", error=(e.error or ev.ErrorInfo(code="verdict")).model_dump())
    else:  # the attempt never ran: another may run, outside the retry policy's count
        rec["status"] = "not_performed"
        rec["voided"] = rec.get("voided", 0) + 1


# Head handlers: everything else, always applied at once.

# Attempts are counted as the log learns they were made, whichever execute call made them:
# an intent record (attempt ``k`` starts), a retry (``EffectRetried{attempt: k}``: attempt
# ``k`` starts now, or, scheduled for later, ``k - 1`` were made) and the step's outcome
# (its ``attempts``: every attempt of the step). Each step counts up to the most it is known
# to have made, so a retry after a durable backoff or a crash counts what came before.


def _count_attempts(s: ExecutionState, step_id: str, made: int) -> None:
    counted = s.attempts_counted.get(step_id, 0)
    if made > counted:
        s.meter.attempts += made - counted
        s.attempts_counted[step_id] = made


def _settle_attempts(s: ExecutionState, step_id: str, made: int) -> None:
    counted = s.attempts_counted.pop(step_id, 0) if s.attempts_counted else 0
    if made > counted:
        s.meter.attempts += made - counted


def _started_meter(s: ExecutionState, e: ev.EffectStarted) -> None:
    _count_attempts(s, e.step_id, e.attempt)


def _retried_meter(s: ExecutionState, e: ev.EffectRetried) -> None:
    _count_attempts(s, e.step_id, e.attempt if e.not_before is None else e.attempt - 1)


def _completed_meter(s: ExecutionState, e: ev.EffectCompleted) -> None:
    m = s.meter
    m.effect_calls += 1
    _settle_attempts(s, e.step_id, e.attempts)
    m.effect_seconds += e.duration_s
    m.bytes_stored += e.output_bytes


def _failed_meter(s: ExecutionState, e: ev.EffectFailed) -> None:
    m = s.meter
    m.effect_calls += 1 if e.attempts else 0
    _settle_attempts(s, e.step_id, e.attempts)
    m.effect_seconds += e.duration_s


def _suspended(s: ExecutionState, e: ev.ExecutionSuspended) -> None:
    s.gates[e.step_id] = {"on": e.on, "correlation_key": e.correlation_key, "wake_at": e.wake_at}
    s.claim = None
    if not s.finished and not s.in_doubt:
        s.status = "suspended"


def _resumed(s: ExecutionState, e: ev.ExecutionResumed) -> None:
    key = resume_key(e.on, e.correlation_key)
    if key in s.resumes:
        return  # a duplicate resume is a no-op
    fire_due(s, e)  # a suspended flow's loop timers due by now fire first
    gates = [
        g for g in s.gates.values() if g["on"] == e.on and g["correlation_key"] == e.correlation_key
    ]
    if not e.timed_out and any(g["wake_at"] is not None and e.at >= g["wake_at"] for g in gates):
        # The reply came after the recorded deadline: the timeout won, whenever the timer
        # task was delivered. Decided by the event's own time, so every fold agrees.
        s.resumes[key] = {"payload": None, "timed_out": True, "seq": e.seq}
    else:
        s.resumes[key] = {"payload": e.payload, "timed_out": e.timed_out, "seq": e.seq}
    opened = bool(gates)
    if opened and s.status == "suspended" and s.parked_reason is None:
        s.status = "running"


def _in_doubt(s: ExecutionState, e: ev.EffectInDoubt) -> None:
    if e.step_id not in s.in_doubt:
        s.in_doubt.append(e.step_id)
    s.claim = None
    s.status = "in_doubt"


def _verdict(s: ExecutionState, e: ev.EffectVerdict) -> None:
    if e.verdict == "performed":
        s.meter.effect_calls += 1
    if e.verdict != "not_performed":  # settled: the attempts it made stay counted
        s.attempts_counted.pop(e.step_id, None)
    if e.step_id in s.in_doubt:
        s.in_doubt.remove(e.step_id)
    if not s.in_doubt and s.status == "in_doubt":
        s.status = "running"


def _parked(s: ExecutionState, e: ev.ExecutionParked) -> None:
    s.parked_reason = e.reason
    s.claim = None
    if not s.finished:
        s.status = "suspended"


def _retried_execution(s: ExecutionState, e: ev.ExecutionRetried) -> None:
    s.parked_reason, s.idle_claims = None, 0
    if not s.finished and not s.in_doubt:
        s.status = "running"


def _completed(s: ExecutionState, e: ev.ExecutionCompleted) -> None:
    s.status, s.output, s.claim = "completed", e.output, None


def _failed(s: ExecutionState, e: ev.ExecutionFailed) -> None:
    s.status, s.error, s.claim = "failed", e.error.model_dump(), None


def _cancelled(s: ExecutionState, e: ev.ExecutionCancelled) -> None:
    s.status, s.claim = "cancelled", None
    s.error = {"code": "cancelled", "type": None, "message": e.reason}


# Cancellation (``loom.kernel.cancellation``): the first request stands.


def _requested(s: ExecutionState, e: ev.CancelRequested) -> None:
    if s.cancel is not None or s.finished:
        return  # the first request stands
    s.cancel = {
        "seq": e.seq,
        "reason": e.reason,
        "by": e.by,
        "deadline": e.at + e.cleanup_s,
        "delivered": None,
    }
    if s.status == "suspended" and s.parked_reason is None:
        s.status = "running"


def _delivered(s: ExecutionState, e: ev.CancelDelivered) -> None:
    if s.cancel is not None and not s.cancel.get("delivered"):
        s.cancel = {**s.cancel, "delivered": e.place or e.seq}


LOOP_TIMER: Final = "loom.loop_timer"
"""The ``on`` of a loop timer's gate and firing (``loom.kernel.loop_timers``)."""


def fire_due(s: ExecutionState, e: ev.ExecutionResumed) -> None:
    """Before a reply recorded at or after a pending loop timer's deadline, the timer fires.

    A suspended flow's loop timers are gates with ``wake_at``; a reply that lands after the
    deadline but before the dispatcher's wake-up must lose to the timer, as it did live. The
    timers due at ``e.at`` take places just before ``e`` in the log order, earliest first.
    Decided from recorded times only, so every fold agrees.
    """
    if e.timed_out:
        return
    due = sorted(
        (g["wake_at"], g["correlation_key"])
        for g in s.gates.values()
        if g["on"] == LOOP_TIMER
        and g["wake_at"] is not None
        and g["wake_at"] <= e.at
        and resume_key(LOOP_TIMER, g["correlation_key"]) not in s.resumes
    )
    for i, (_, key) in enumerate(due, start=1):
        place = e.seq - 1 + i / (len(due) + 1)
        s.resumes[resume_key(LOOP_TIMER, key)] = {"payload": None, "timed_out": True, "seq": place}


Handler = Callable[[ExecutionState, Any], None]
"""A fold handler: applies one event to the state in place."""

_HEAD: dict[str, Handler] = {
    "ExecutionStarted": _started,
    "ExecutionClaimed": _claimed,
    "EffectStarted": _started_meter,
    "EffectRetried": _retried_meter,
    "EffectCompleted": _completed_meter,
    "EffectFailed": _failed_meter,
    "ExecutionSuspended": _suspended,
    "ExecutionResumed": _resumed,
    "EffectInDoubt": _in_doubt,
    "EffectVerdict": _verdict,
    "ExecutionParked": _parked,
    "ExecutionRetried": _retried_execution,
    "CancelRequested": _requested,
    "CancelDelivered": _delivered,
    "ExecutionCompleted": _completed,
    "ExecutionFailed": _failed,
    "ExecutionCancelled": _cancelled,
}

_STEP: dict[str, Handler] = STEP_HANDLERS  # (the state parses deferred step records with it)
_STEP.update(
    {
        "EffectStarted": _effect_started,
        "EffectCompleted": _effect_completed,
        "EffectFailed": _effect_failed,
        "EffectRetried": _retried,
        "DecisionRecorded": _decision,
        "EffectInDoubt": _in_doubt_step,
        "EffectVerdict": _verdict_step,
    }
)


def evolve(state: ExecutionState, event: ev.Event) -> ExecutionState:
    """Apply one event to ``state`` in place and return it.

    Progress (any event but a resume, a claim or a park) clears a parked reason (a fixed flow
    that moves on is no longer parked) and the count of claims without progress.
    """
    head = _HEAD.get(event.type)
    if head is not None:
        head(state, event)
    step = _STEP.get(event.type)
    if step is not None:
        if state._raw_tail is not None:  # pyright: ignore[reportPrivateUsage]
            state._deferred.append(event)  # pyright: ignore[reportPrivateUsage]
        else:
            step(state, event)
    if event.type not in _KEEPS_PARK:
        state.parked_reason = None
        state.idle_claims = 0  # progress: the calls that claimed it were not stuck
    state.last_seq = event.seq
    state.updated_at = event.at
    return state


# A start keeps the park a fork's start sets until its prefix is copied (loom.ops.fork); a
# child shared with a fork of its parent is not moved by the record (loom.primitives.children).
# Deliveries to the inbox are not progress either (a primitive adds its own: ``keep_park``).
_KEEPS_PARK: set[str] = {
    "ExecutionParked",
    "ExecutionResumed",
    "ExecutionClaimed",
    "ExecutionDequeued",  # (rides a claim: no progress of its own)
    "MessageReceived",
    "ExecutionStarted",
    "ChildShared",
}


def keep_park(types: Iterable[str]) -> None:
    """Count events of ``types`` as no progress: they keep a parked reason and the count of
    claims without progress (deliveries from outside, which the flow has not acted on)."""
    _KEEPS_PARK.update(types)


def fold(events: Iterable[ev.Event], state: ExecutionState | None = None) -> ExecutionState:
    """Fold events into a state, starting from ``state`` (consumed) or from nothing."""
    # A state folded from nothing has its step records at once (none yet, nothing to parse).
    current = state if state is not None else ExecutionState(_steps={}, _decisions={})
    for event in events:
        evolve(current, event)
    return current


def register(head: Mapping[str, Handler], step: Mapping[str, Handler]) -> None:
    """Add a primitive's fold handlers (called by ``loom.kernel.primitive.install``).

    ``head`` handlers are applied to every event at once; ``step`` handlers touch only the
    per-step records and are deferred while a snapshot's step records are unparsed. A head
    handler for an event type that already has one runs after it (the kernel's first).
    """
    for kind, handler in head.items():
        before = _HEAD.get(kind)
        _HEAD[kind] = handler if before is None else _chain(before, handler)
    for kind, handler in step.items():
        if kind in _STEP:
            raise ConfigurationError(f"two step handlers for {kind!r}")
        _STEP[kind] = handler


def _chain(first: Handler, then: Handler) -> Handler:
    def both(s: ExecutionState, e: Any) -> None:
        first(s, e)
        then(s, e)

    return both
