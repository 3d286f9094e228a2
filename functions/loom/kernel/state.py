"""The folded state of one execution, :class:`ExecutionState`, its records and its snapshot.

The state is built only by :mod:`loom.kernel.fold` (``fold``/``evolve``), which holds the event
handlers; this module holds what the state is and how it is written to and read from a
snapshot: the small fields as one JSON line, the per-step records after it, parsed only when
something reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from loom.kernel import snapshot_json


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
    deadline: float  # a wait's recorded end (loom.primitives.event_reads)
    found: bool  # whether a read found its value (loom.primitives.event_reads)
    voided: int  # attempts a ``not_performed`` verdict declared never ran


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

STEP_HANDLERS: dict[str, Callable[[ExecutionState, Any], None]] = {}
"""The fold's handlers of per-step records by event type (filled by ``loom.kernel.fold``):
a snapshot's records are parsed on first use, and the events folded meanwhile applied."""


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
    patches: list[str] = field(default_factory=_list)  # change ids (loom.primitives.patches)
    queue: str | None = None  # the queue it runs on, and its partition key (loom.primitives.queues)
    partition_key: str | None = None
    # A queued start's options and, once admitted, ``dequeued_at`` (loom.primitives.queue_options)
    queue_options: dict[str, Any] = field(default_factory=_dict)
    mailbox: dict[str, int] = field(default_factory=_dict)  # loom.primitives.messages
    message_ids: dict[str, str] = field(default_factory=_dict)  # loom.primitives.messages
    # Message ids of runs before the current one, by when their run ended: still refused as
    # repeats for a while (loom.primitives.continuation).
    message_ids_kept: dict[str, float] = field(default_factory=_dict)
    published: dict[str, dict[str, Any]] = field(default_factory=_dict)
    # loom.primitives.updates: each update by id (its name, slot, run, status, outcome), and
    # how many the current run accepted; loom.primitives.streams: each stream by key.
    updates: dict[str, dict[str, Any]] = field(default_factory=_dict)
    update_slots: int = 0
    streams: dict[str, dict[str, Any]] = field(default_factory=_dict)
    run: int = 1  # loom.primitives.continuation: which run of the execution this state is
    run_started_seq: int = 1
    claim: dict[str, Any] | None = None
    in_doubt: list[str] = field(default_factory=_list)
    parked_reason: str | None = None
    idle_claims: int = 0  # execute calls that claimed it in a row with no progress since
    output: Any = None
    error: dict[str, Any] | None = None
    cancel: dict[str, Any] | None = None  # a pending cancel request (loom.kernel.cancellation)
    deadline: float | None = None  # the recorded flow timeout
    parent: dict[str, str] | None = None  # a child flow's parent (loom.primitives.children)
    step_numbering: int | None = None  # how step ids are numbered (loom.kernel.context)
    children: dict[str, dict[str, str]] = field(default_factory=_dict)
    # Forks of its parent that share this child: told its end as the parent is.
    shared_with: list[str] = field(default_factory=_list)
    meter: Meter = field(default_factory=Meter)
    # Attempts of steps still retrying already counted in ``meter`` (by step id; a step
    # leaves when its outcome is recorded): see ``loom.kernel.fold``'s attempt counting.
    attempts_counted: dict[str, int] = field(default_factory=_dict)
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
        tail: dict[str, Any] = snapshot_json.loads(self._raw_tail) if self._raw_tail else {}
        self._steps = tail.get("steps", {})
        self._decisions = tail.get("decisions", {})
        self._raw_tail = None
        deferred, self._deferred = self._deferred, []
        for event in deferred:
            STEP_HANDLERS[event.type](self, event)

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
            tail = snapshot_json.dumps({"steps": self.steps, "decisions": self.decisions})
        return (self.head_json() + b"\n" + tail).decode()

    def to_dict(self, head: bytes | None = None) -> dict[str, Any]:
        """Every field as JSON-able values (parses the step records).

        Args:
            head: :meth:`head_json` taken earlier, to report the small fields as they were
                then (the step records are this state's own, as always).
        """
        return {
            **snapshot_json.loads(head or self.head_json()),
            "steps": self.steps,
            "decisions": self.decisions,
        }

    def head_json(self) -> bytes:
        """The small fields (all but the step records) as JSON: a copy, taken now."""
        # The codec writes a dataclass's fields in their order and leaves out those named with a
        # leading underscore (the step records and their bookkeeping): the snapshot's first
        # line, at a fraction of the cost of building that dict first.
        return snapshot_json.dumps(self)

    @classmethod
    def from_json(cls, data: str) -> ExecutionState:
        """Rebuild from a snapshot written by :meth:`to_json` (step records stay unparsed)."""
        head, _, tail = data.encode().partition(b"\n")
        raw = snapshot_json.loads(head)
        raw["meter"] = Meter(**raw["meter"])
        return cls(**raw, _raw_tail=tail)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecutionState):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]
