"""The fold: ``ExecutionState`` is a pure function of the event log.

``fold(events)`` reads nothing but its arguments: no clock, no I/O, no randomness. The same
events always give the same state, which is why a snapshot can stand in for a log prefix.

``evolve`` applies one event in place and is what the runtime calls per append, so a step costs
O(1) state work however long the history is. State values are plain JSON-able dicts, so a
snapshot is one ``json.dumps`` away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import orjson

from loom import events as ev


class StepRecord(TypedDict, total=False):
    """What the log says about one effect step."""

    effect: str
    status: str  # started | retrying | backoff | completed | failed | in_doubt | not_performed
    not_before: float  # backoff: when the next attempt may start
    output: Any
    error: dict[str, Any]
    attempt: int
    started_at: float
    idempotency_key: str
    verdict_by: str
    episode: int  # seq of the EffectInDoubt that put it in doubt (what a verdict names)
    seq: int  # where the outcome (completion, failure, verdict) sits in the log


class GateRecord(TypedDict):
    """A gate or timer the flow opened."""

    on: str
    correlation_key: str
    wake_at: float | None


class ResumeRecord(TypedDict):
    """A resume that arrived (matched to a gate or still buffered)."""

    payload: Any
    timed_out: bool
    seq: float  # where it sits in the log: the flow sees it after every outcome before it


def resume_key(on: str, correlation_key: str) -> str:
    """The key under which a resume is stored: ``on`` and the correlation key."""
    return f"{on}\x1f{correlation_key}"


@dataclass
class Meter:
    """Per-execution counters, for metering and budgets."""

    effect_calls: int = 0
    attempts: int = 0
    effect_seconds: float = 0.0
    bytes_stored: int = 0


_TAIL = ("steps", "decisions")


# The factories of the state's containers: the builtins themselves, typed for the checker
# (which takes a bare ``dict`` for ``dict[Unknown, Unknown]``). Not ``list[str]`` and the
# like, nor a function returning ``[]``: calling a typing alias costs several times what the
# builtin does (it tries, and fails, to tag the list it made), a Python function twice, and
# every execution folds a fresh state with a dozen containers.
_list = cast("Callable[[], list[Any]]", list)
_dict = cast("Callable[[], dict[Any, Any]]", dict)


@dataclass(eq=False)
class ExecutionState:
    """The folded state of one execution. Built only by :func:`fold` / :func:`evolve`.

    A snapshot keeps the small fields and the per-step records apart, and the step records
    are parsed only when something reads them: a resume or a status query on a 10,000-step
    execution never pays for its step history.
    """

    execution_id: str = ""
    flow: str = ""
    input: Any = None
    flow_version: str = "1"
    capabilities: list[str] = field(default_factory=_list)
    budgets: dict[str, float] = field(default_factory=_dict)
    status: str = "running"
    last_seq: int = 0
    started_at: float = 0.0
    updated_at: float = 0.0
    gates: dict[str, GateRecord] = field(default_factory=_dict)
    resumes: dict[str, ResumeRecord] = field(default_factory=_dict)
    patches: list[str] = field(default_factory=_list)  # change ids (loom.patches)
    queue: str | None = None  # the queue it runs on, and its partition key (loom.queues)
    partition_key: str | None = None
    mailbox: dict[str, int] = field(default_factory=_dict)  # loom.messages
    message_ids: dict[str, str] = field(default_factory=_dict)  # loom.messages
    published: dict[str, dict[str, Any]] = field(default_factory=_dict)
    run: int = 1  # loom.continuation: which run of the execution this state is
    run_started_seq: int = 1
    claim: dict[str, Any] | None = None
    in_doubt: list[str] = field(default_factory=_list)
    parked_reason: str | None = None
    idle_claims: int = 0  # execute calls that claimed it in a row with no progress since
    output: Any = None
    error: dict[str, Any] | None = None
    cancel: dict[str, Any] | None = None  # a pending cancel request (loom.cancellation)
    deadline: float | None = None  # the recorded flow timeout
    parent: dict[str, str] | None = None  # a child flow's parent (loom.children)
    children: dict[str, dict[str, str]] = field(default_factory=_dict)
    meter: Meter = field(default_factory=Meter)
    _steps: dict[str, StepRecord] | None = field(default=None, repr=False)
    _decisions: dict[str, Any] | None = field(default=None, repr=False)
    _raw_tail: bytes | None = field(default=None, repr=False)
    _deferred: list[Any] = field(default_factory=_list, repr=False)

    @property
    def steps(self) -> dict[str, StepRecord]:
        """Effect steps by step id."""
        if self._steps is None:
            self._load_tail()
        assert self._steps is not None
        return self._steps

    @property
    def decisions(self) -> dict[str, Any]:
        """Recorded ``now/uuid/random`` values by step id."""
        if self._decisions is None:
            self._load_tail()
        assert self._decisions is not None
        return self._decisions

    def _load_tail(self) -> None:
        tail: dict[str, Any] = orjson.loads(self._raw_tail) if self._raw_tail else {}
        self._steps = tail.get("steps", {})
        self._decisions = tail.get("decisions", {})
        self._raw_tail = None
        deferred, self._deferred = self._deferred, []
        for event in deferred:
            _STEP[event.type](self, event)

    def step_key(self, step_id: str) -> str:
        """A step's key, unique across runs (an effect's idempotency key, a message's id):
        ``"{execution_id}:{step_id}"``, with ``#run{n}`` after the id from run 2 on."""
        owner = self.execution_id if self.run == 1 else f"{self.execution_id}#run{self.run}"
        return f"{owner}:{step_id}"

    @property
    def finished(self) -> bool:
        """Whether the execution reached a terminal status."""
        return self.status in ("completed", "failed", "cancelled")

    def open_gates(self) -> dict[str, GateRecord]:
        """Gates opened and not yet matched by a resume."""
        return {
            sid: g
            for sid, g in self.gates.items()
            if resume_key(g["on"], g["correlation_key"]) not in self.resumes
        }

    def next_wake_at(self) -> float | None:
        """The earliest ``wake_at`` among open gates, if any."""
        times = [g["wake_at"] for g in self.open_gates().values() if g["wake_at"] is not None]
        limit = self.cancel["deadline"] if self.cancel else self.deadline  # cleanup, timeout
        if limit is not None:
            times.append(limit)
        return min(times) if times else None

    def to_json(self) -> str:
        """Serialize for a snapshot: the small fields, a newline, then the step records."""
        tail = self._raw_tail
        if tail is None or self._deferred:
            tail = orjson.dumps({"steps": self.steps, "decisions": self.decisions})
        return (self.head_json() + b"\n" + tail).decode()

    def to_dict(self, head: bytes | None = None) -> dict[str, Any]:
        """Every field as JSON-able values (parses the step records).

        Args:
            head: :meth:`head_json` taken earlier, to report the small fields as they were
                then (the step records are this state's own, as always).
        """
        return {
            **orjson.loads(head or self.head_json()),
            "steps": self.steps,
            "decisions": self.decisions,
        }

    def head_json(self) -> bytes:
        """The small fields (all but the step records) as JSON: a copy, taken now."""
        # orjson writes a dataclass's fields in their order and leaves out those named with a
        # leading underscore (the step records and their bookkeeping): the snapshot's first
        # line, at a fraction of the cost of building that dict first.
        return orjson.dumps(self)

    @classmethod
    def from_json(cls, data: str) -> ExecutionState:
        """Rebuild from a snapshot written by :meth:`to_json` (step records stay unparsed)."""
        head, _, tail = data.encode().partition(b"\n")
        raw = orjson.loads(head)
        raw["meter"] = Meter(**raw["meter"])
        return cls(**raw, _raw_tail=tail)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecutionState):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def _started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    s.execution_id, s.flow, s.input = e.execution_id, e.flow, e.input
    s.flow_version, s.capabilities, s.budgets = e.flow_version, list(e.capabilities), e.budgets
    s.status, s.started_at, s.deadline, s.parent = "running", e.at, e.deadline, e.parent


def _claimed(s: ExecutionState, e: ev.ExecutionClaimed) -> None:
    if s.claim is None or s.claim["holder"] != e.holder:  # an extension is the same call
        s.idle_claims += 1
    s.claim = {"holder": e.holder, "until": e.until}
    if not s.finished and not s.in_doubt:
        s.status = "running"


# Step handlers touch only ``steps``/``decisions``; they are deferred while a snapshot's step
# records are still unparsed, so a resume never parses a long history.


def _effect_started(s: ExecutionState, e: ev.EffectStarted) -> None:
    s.steps[e.step_id] = {
        "effect": e.effect,
        "status": "started",
        "attempt": e.attempt,
        "started_at": e.at,
        "idempotency_key": e.idempotency_key,
    }


def _effect_completed(s: ExecutionState, e: ev.EffectCompleted) -> None:
    steps, step_id = s.steps, e.step_id  # (once each: this runs for every step)
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
    else:
        rec["status"] = "not_performed"


# Head handlers: everything else, always applied at once.


def _completed_meter(s: ExecutionState, e: ev.EffectCompleted) -> None:
    m = s.meter
    m.effect_calls += 1
    m.attempts += e.attempts
    m.effect_seconds += e.duration_s
    m.bytes_stored += e.output_bytes


def _failed_meter(s: ExecutionState, e: ev.EffectFailed) -> None:
    m = s.meter
    m.effect_calls += 1 if e.attempts else 0
    m.attempts += e.attempts
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
    _loop_timers.fire_due(s, e)  # a suspended flow's loop timers due by now fire first
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


_HEAD: dict[str, Callable[[ExecutionState, Any], None]] = {
    "ExecutionStarted": _started,
    "ExecutionClaimed": _claimed,
    "EffectCompleted": _completed_meter,
    "EffectFailed": _failed_meter,
    "ExecutionSuspended": _suspended,
    "ExecutionResumed": _resumed,
    "EffectInDoubt": _in_doubt,
    "EffectVerdict": _verdict,
    "ExecutionParked": _parked,
    "ExecutionRetried": _retried_execution,
    "ExecutionCompleted": _completed,
    "ExecutionFailed": _failed,
    "ExecutionCancelled": _cancelled,
}

_STEP: dict[str, Callable[[ExecutionState, Any], None]] = {
    "EffectStarted": _effect_started,
    "EffectCompleted": _effect_completed,
    "EffectFailed": _effect_failed,
    "EffectRetried": _retried,
    "DecisionRecorded": _decision,
    "EffectInDoubt": _in_doubt_step,
    "EffectVerdict": _verdict_step,
}


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


# A start keeps the park a fork's start sets until its prefix is copied (loom.fork).
_KEEPS_PARK = frozenset(
    {
        "ExecutionParked",
        "ExecutionResumed",
        "ExecutionClaimed",
        "MessageReceived",
        "ExecutionStarted",
    }
)


def fold(events: Iterable[ev.Event], state: ExecutionState | None = None) -> ExecutionState:
    """Fold events into a state, starting from ``state`` (consumed) or from nothing."""
    # A state folded from nothing has its step records at once (none yet, nothing to parse).
    current = state if state is not None else ExecutionState(_steps={}, _decisions={})
    for event in events:
        evolve(current, event)
    return current


# Primitives in modules of their own register their handlers into ``_HEAD``/``_STEP``; they
# are imported here so no fold ever runs without them.
from loom import cancellation as _cancellation  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import children as _children  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import continuation as _continuation  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import fork as _fork  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import loop_timers as _loop_timers  # noqa: E402
from loom import messages as _messages  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import patches as _patches  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import published as _published  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
from loom import queues as _queues  # noqa: E402, F401  # pyright: ignore[reportUnusedImport]
