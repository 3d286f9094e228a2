"""The invariants checked after every run, over the final logs, summaries and the ledger.

Each check is a function of :class:`Final` (everything the run left behind) that reports
what it finds with :meth:`Final.violation`. To add an invariant: write ``check_<name>`` here
(or in :mod:`tests.sim.invariants_effects`), add it to :data:`CHECKS`, and give the
invariant a dotted name that says what broke (the reports count violations by that name).

Checked here, per execution:

* ``log.seqs``: one log, seqs ``1..n`` without a gap, ``ExecutionStarted`` first and once;
* ``log.terminal``: at most one terminal event, and nothing after it;
* ``log.summary``: the summary row says what the log says (status, park, last seq);
* ``log.steps``: each step's events follow its life: an outcome ends it, ``EffectInDoubt``
  only while an intent is open, a verdict only while in doubt;
* ``log.duplicates``: within a run, no resume (``on`` + key) and no message id twice;
* ``liveness``: after the drain, every execution has ended or is parked with a reason
  (parked for nondeterminism counts as ``replay.parked``: the simulated flows are
  deterministic);
* ``replay.diverged``: the toolkit's replay check replays the final log with the same step
  ids (:mod:`loom.ops.replay_check`);
* ``consume.once``/``messages.lost``: each message and each child result taken once, and a
  mailbox that completed took every message sent to it.

The effect invariants (at most once, own keys, attempts, meter, budgets) are in
:mod:`tests.sim.invariants_effects`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loom import events as ev
from loom.kernel.fold import ExecutionState, fold
from loom.ops.replay_check import ReplayChecker
from loom.store.base import ExecutionSummary
from tests.sim.app import app
from tests.sim.workloads import Expectations
from tests.sim.world import World

_OUTCOMES = frozenset({"EffectCompleted", "EffectFailed"})

INVARIANTS: dict[str, str] = {
    "log.seqs": "one log per execution: seqs 1..n, ExecutionStarted first and once",
    "log.terminal": "at most one terminal event, and nothing after it",
    "log.summary": "the summary row says what the log says",
    "log.steps": "a step's events follow its life (no doubt after an outcome)",
    "log.duplicates": "no resume and no message id appended twice in one run",
    "liveness": "after the drain, every execution ended or is parked with a reason",
    "replay.parked": "no execution parked for nondeterminism",
    "replay.diverged": "the replay check replays every final log with the same step ids",
    "consume.once": "each message and each child result taken once",
    "messages.lost": "a mailbox that completed took every message sent to it",
    "effects.intent": "a non-idempotent attempt is invoked after its intent record",
    "effects.once": "a non-idempotent attempt is invoked at most once",
    "effects.keys": "an effect runs only under its own step's key",
    "attempts.recorded": "a step's outcome counts every attempt made",
    "attempts.meter": "the meter counts every attempt made",
    "budgets": "no step starts once max_attempts attempts were made",
    "queues.concurrency": "a queue never runs more executions than its concurrency",
    "queues.partition": "a queue never runs two executions of one partition key at once",
    "queues.worker_concurrency": "a worker never runs more of a queue than its worker_concurrency",
    "engine.error": "the engine raises nothing but its own errors",
    "engine.hang": "every request is answered",
    "engine.loop": "no task error goes unretrieved",
    "sim.stuck": "the simulated world never deadlocks",
}
"""Every invariant the simulator checks, by the name its violations carry."""


@dataclass
class Final:
    """What a run left behind, read once for every check."""

    world: World
    expect: Expectations
    logs: dict[str, list[ev.Event]]
    summaries: dict[str, ExecutionSummary]
    states: dict[str, ExecutionState]

    def violation(self, invariant: str, execution_id: str | None, detail: str) -> None:
        """Report a broken invariant."""
        self.world.violation(invariant, execution_id, detail)


def runs(events: Sequence[ev.Event]) -> list[list[ev.Event]]:
    """The log cut into runs (continue-as-new): each ``ExecutionContinued`` ends one."""
    out: list[list[ev.Event]] = [[]]
    for event in events:
        out[-1].append(event)
        if event.type == "ExecutionContinued":
            out.append([])
    return out


def check_seqs(f: Final) -> None:
    for eid, events in f.logs.items():
        seqs = [e.seq for e in events]
        if seqs != list(range(1, len(seqs) + 1)):
            f.violation("log.seqs", eid, f"seqs are not 1..{len(seqs)}: {seqs}")
        starts = [e.seq for e in events if e.type == "ExecutionStarted"]
        if starts != [1]:
            f.violation("log.seqs", eid, f"ExecutionStarted at seqs {starts}")


def check_terminal(f: Final) -> None:
    for eid, events in f.logs.items():
        ends = [i for i, e in enumerate(events) if e.type in ev.TERMINAL_TYPES]
        if len(ends) > 1:
            kinds = [f"{events[i].type}@{events[i].seq}" for i in ends]
            f.violation("log.terminal", eid, f"{len(ends)} terminal events: {kinds}")
        if ends and ends[0] != len(events) - 1:
            after = [f"{e.type}@{e.seq}" for e in events[ends[0] + 1 :]]
            end = events[ends[0]]
            f.violation("log.terminal", eid, f"after {end.type}@{end.seq}: {after}")


def check_summary(f: Final) -> None:
    for eid, state in f.states.items():
        row = f.summaries[eid]
        mine = (row.status, row.parked_reason, row.last_seq)
        log = (state.status, state.parked_reason, state.last_seq)
        if mine != log:
            f.violation("log.summary", eid, f"summary says {mine[:2]}, the log {log[:2]}")


def check_steps(f: Final) -> None:
    for eid, events in f.logs.items():
        for run in runs(events):
            for problem in step_problems(run):
                f.violation("log.steps", eid, problem)


def step_problems(run: Sequence[ev.Event]) -> list[str]:
    """What breaks a step's life in one run's events (see the module docstring)."""
    closed: dict[str, str] = {}  # step -> the event that ended it
    intent: set[str] = set()  # steps with an open intent record
    doubt: set[str] = set()  # steps in doubt
    problems: list[str] = []
    for e in run:
        sid: str | None = getattr(e, "step_id", None)
        if sid is None or e.type not in _STEP_EVENTS:
            continue
        where = f"{e.type}@{e.seq} of step {sid}"
        if sid in closed:
            problems.append(f"{where} after the step ended ({closed[sid]})")
            continue
        if e.type == "EffectStarted":
            intent.add(sid)
        elif e.type == "EffectRetried" and e.not_before is not None:  # type: ignore[union-attr]
            intent.discard(sid)  # the attempt's failure is known: nothing in doubt
        elif e.type == "EffectInDoubt":
            if sid in doubt:
                problems.append(f"{where} while the step is in doubt already")
            elif sid not in intent:
                problems.append(f"{where} with no open intent record")
            doubt.add(sid)
        elif e.type == "EffectVerdict":
            if sid not in doubt:
                problems.append(f"{where} while the step is not in doubt")
            doubt.discard(sid)
            intent.discard(sid)
            if e.verdict != "not_performed":  # type: ignore[union-attr]
                closed[sid] = f"{e.type}@{e.seq}"
        elif e.type in _OUTCOMES:
            if sid in doubt:
                problems.append(f"{where} while the step is in doubt")
            closed[sid] = f"{e.type}@{e.seq}"
    return problems


_STEP_EVENTS = frozenset(
    {"EffectStarted", "EffectRetried", "EffectInDoubt", "EffectVerdict", *_OUTCOMES}
)


def check_duplicates(f: Final) -> None:
    for eid, events in f.logs.items():
        for run in runs(events):
            resumes = Counter(
                (e.on, e.correlation_key)  # type: ignore[union-attr]
                for e in run
                if e.type == "ExecutionResumed"
            )
            messages = Counter(e.message_id for e in run if e.type == "MessageReceived")  # type: ignore[union-attr]
            for what, n in [*resumes.items(), *messages.items()]:
                if n > 1:
                    f.violation("log.duplicates", eid, f"{what} appended {n} times in one run")


def check_liveness(f: Final) -> None:
    for eid in f.expect.started:
        if eid not in f.states:
            f.violation("liveness", eid, "a client started it, and it does not exist")
    for eid, state in f.states.items():
        if state.parked_reason is not None and "nondetermin" in state.parked_reason.lower():
            f.violation("replay.parked", eid, state.parked_reason)
        elif not state.finished and state.parked_reason is None:
            f.violation("liveness", eid, f"left {state.status} after the drain")


def check_consumption(f: Final) -> None:
    for eid, events in f.logs.items():
        taken = [
            e.output  # type: ignore[union-attr]
            for e in events
            if e.type == "EffectCompleted" and e.effect == "sim.consume"  # type: ignore[union-attr]
        ]
        for what, n in Counter(taken).items():
            if n > 1:
                f.violation("consume.once", eid, f"{what} taken {n} times")
        expected = f.expect.messages.get(eid)
        if expected is not None and f.states[eid].status == "completed":
            missing = sorted({f"msg:{m}" for m in expected} - set(taken))
            if missing:
                f.violation("messages.lost", eid, f"completed without taking {missing}")


async def check_replay(f: Final) -> None:
    """Replay every final log with the toolkit's replay check."""
    checker = ReplayChecker(app, f.world.raw)
    rows = [f.summaries[eid] for eid in sorted(f.summaries)]
    for checked in await checker.check(rows):
        if checked.divergence is not None:
            f.violation("replay.diverged", checked.summary.execution_id, checked.divergence.line())


CHECKS: list[Callable[[Final], None]] = [
    check_seqs,
    check_terminal,
    check_summary,
    check_steps,
    check_duplicates,
    check_liveness,
    check_consumption,
]


async def read_final(world: World, expect: Expectations) -> Final:
    """Read every execution's log and summary from the shared store."""
    rows = await world.raw.list(limit=1_000_000, oldest_first=True)
    logs = {r.execution_id: await world.raw.read(r.execution_id) for r in rows}
    summaries = {r.execution_id: r for r in rows}
    states = {eid: fold(events) for eid, events in logs.items()}
    return Final(world, expect, logs, summaries, states)
