"""The invariants about effects, checked after every run against the ledger of invocations.

* ``effects.once``: a non-idempotent attempt is invoked at most once, and never after a
  ``not_performed`` verdict declared it did not run (the only verdict that allows another
  invocation, as a new attempt). (``effects.intent``, checked as each invocation starts,
  is in :mod:`tests.sim.ledger`.)
* ``effects.keys``: an effect is invoked only under its own key: the key's step, in the
  run it names, records that effect and nothing else.
* ``attempts.recorded``: a step's recorded outcome (``EffectCompleted``/``EffectFailed``)
  counts every attempt the ledger saw for its key, across execute calls and crashes
  (distinct attempt numbers: a first attempt lost with its worker is made again under the
  same number), and no more than the log shows begun (an attempt recorded as beginning and
  lost with its worker before it ran may be counted: nobody can tell). Steps that went
  through doubt are left out: a verdict decides their count.
* ``attempts.meter``: the execution's meter counts the same attempts; for a step a verdict
  settled with no recorded outcome, or one still retrying when its run ended, the attempts
  begun (at least those the log shows made, at most those it shows begun).
* ``budgets``: with ``budgets={"max_attempts": B}``, no step starts its first attempt once
  ``B`` attempts have been made.
"""

from __future__ import annotations

from collections import defaultdict

from loom import events as ev
from tests.sim.invariants import Final, runs
from tests.sim.ledger import Invocation

_OUTCOMES = ("EffectCompleted", "EffectFailed")


def _run_of(key: str) -> tuple[str, int, str]:
    """``(execution id, run, step id)`` of an idempotency key (``loom.kernel.state.step_key``)."""
    owner, step_id = key.rsplit(":", 1)
    eid, _, run = owner.partition("#run")
    return eid, int(run) if run else 1, step_id


def check_once(f: Final) -> None:
    attempts: dict[tuple[str, int], int] = defaultdict(int)
    for inv in f.world.ledger.invocations:
        if not inv.idempotent:
            attempts[(inv.key, inv.attempt)] += 1
    for (key, attempt), n in sorted(attempts.items()):
        if n > 1:
            f.violation("effects.once", key.rsplit(":", 1)[0], f"{key} attempt {attempt} x{n}")
    for eid, events in f.logs.items():
        for number, run in enumerate(runs(events), start=1):
            for step_id, attempt in _declared_not_performed(run):
                key = _key(eid, number, step_id)
                ran = [i for i in f.world.ledger.by_key.get(key, ()) if i.attempt == attempt]
                if ran:
                    f.violation(
                        "effects.once",
                        eid,
                        f"{key} attempt {attempt} ran (by {ran[0].worker} at "
                        f"{ran[0].at:.2f}) though a verdict said it did not",
                    )


def _key(eid: str, run: int, step_id: str) -> str:
    return f"{eid}:{step_id}" if run == 1 else f"{eid}#run{run}:{step_id}"


def _declared_not_performed(run: list[ev.Event]) -> list[tuple[str, int]]:
    """``(step, attempt)`` of each ``not_performed`` verdict in ``run``."""
    attempt: dict[str, int] = {}
    out: list[tuple[str, int]] = []
    for e in run:
        if isinstance(e, ev.EffectStarted | ev.EffectRetried):
            attempt[e.step_id] = e.attempt
        elif isinstance(e, ev.EffectVerdict) and e.verdict == "not_performed":
            out.append((e.step_id, attempt.get(e.step_id, 1)))
    return out


def check_keys(f: Final) -> None:
    for inv in f.world.ledger.invocations:
        eid, number, step_id = _run_of(inv.key)
        events = f.logs.get(eid)
        if events is None or eid != inv.execution_id or step_id != inv.step_id:
            f.violation("effects.keys", inv.execution_id, f"{inv.effect} ran under {inv.key}")
            continue
        cut = runs(events)
        run = cut[number - 1] if number <= len(cut) else []
        seen = {
            _what(e)
            for e in run
            if getattr(e, "step_id", None) == step_id and e.type != "EffectVerdict"
        }
        if seen - {inv.effect}:
            f.violation(
                "effects.keys", eid, f"{inv.effect} ran under {inv.key}; the log has {seen}"
            )


def _what(e: ev.Event) -> str:
    """What a step event records at its step: an effect's name, or the kind of step."""
    effect = getattr(e, "effect", None)
    return effect if isinstance(effect, str) else e.type


def check_attempts(f: Final) -> None:
    for eid, events in f.logs.items():
        low = high = 0.0  # what the meter may say: the attempts made .. those begun
        for number, run in enumerate(runs(events), start=1):
            begun = _begun(run)
            doubted = {e.step_id for e in run if isinstance(e, ev.EffectInDoubt)}
            outcomes = {
                e.step_id for e in run if isinstance(e, ev.EffectCompleted | ev.EffectFailed)
            }
            settled = outcomes | {
                e.step_id
                for e in run
                if isinstance(e, ev.EffectVerdict) and e.verdict != "not_performed"
            }
            for step_id, most in begun.items():
                if step_id not in settled:  # still retrying when the run or execution ended:
                    # the attempts before the last one begun were made; that one may have
                    key = _key(eid, number, step_id)
                    made = _distinct(f.world.ledger.by_key.get(key, []))
                    low, high = low + min(made, most - 1), high + max(most, made)
            for e in run:
                if isinstance(e, ev.EffectVerdict) and e.verdict != "not_performed":
                    if e.step_id not in outcomes:  # settled by the verdict alone: the
                        # attempts begun count (a performed one ran; a failed one began)
                        key = _key(eid, number, e.step_id)
                        made = _distinct(f.world.ledger.by_key.get(key, []))
                        low, high = low + made, high + max(begun.get(e.step_id, 1), made)
                    continue
                if not isinstance(e, ev.EffectCompleted | ev.EffectFailed):
                    continue
                if e.step_id in doubted:  # a verdict settled what ran: the log's count stands
                    low, high = low + e.attempts, high + e.attempts
                    continue
                made = _distinct(f.world.ledger.by_key.get(_key(eid, number, e.step_id), []))
                most = max(begun.get(e.step_id, 1), made)
                low, high = low + made, high + most
                if not made <= e.attempts <= most:
                    f.violation(
                        "attempts.recorded",
                        eid,
                        f"step {e.step_id} records {e.attempts} attempts, the ledger has "
                        f"{made}" + (f" ({most} begun)" if most != made else ""),
                    )
        meter = f.states[eid].meter.attempts
        if not low <= meter <= high:
            span = f"{low:g}" if low == high else f"{low:g} to {high:g}"
            f.violation("attempts.meter", eid, f"meter counts {meter:g} attempts, made {span}")


def _begun(run: list[ev.Event]) -> dict[str, int]:
    """The highest attempt each step of ``run`` recorded as beginning (an attempt recorded
    and then lost with its worker before it ran counts as begun, never as made)."""
    begun: dict[str, int] = {}
    for e in run:
        if isinstance(e, ev.EffectStarted | ev.EffectRetried):
            begun[e.step_id] = max(begun.get(e.step_id, 1), e.attempt)
    return begun


def _distinct(invocations: list[Invocation]) -> int:
    return len({i.attempt for i in invocations})


def check_budgets(f: Final) -> None:
    by_execution: dict[str, list[Invocation]] = defaultdict(list)
    for inv in f.world.ledger.invocations:
        by_execution[inv.execution_id].append(inv)
    for eid, events in f.logs.items():
        first = events[0]
        limit = (
            first.budgets.get("max_attempts") if isinstance(first, ev.ExecutionStarted) else None
        )
        if limit is None:
            continue
        made: set[tuple[str, int]] = set()
        for inv in by_execution.get(eid, []):
            new = (inv.key, inv.attempt) not in made
            if new and inv.attempt == 1 and len(made) >= limit:
                f.violation(
                    "budgets",
                    eid,
                    f"{inv.key} started after {len(made)} attempts (max_attempts={limit:g})",
                )
            made.add((inv.key, inv.attempt))


CHECKS = [check_once, check_keys, check_attempts, check_budgets]
