"""The chaos run's invariant checks see what they name: each is fed a log or a ledger that
breaks it (the shapes the issue reported: a forked Firestore log, ids with a gap, a charge
made twice, a park re-appended, a queue over its limit) and one that does not."""

from __future__ import annotations

import json
from typing import Any

from loom.events import (
    EffectCompleted,
    EffectInDoubt,
    EffectStarted,
    EffectVerdict,
    Event,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionStarted,
)
from tests.chaos.app import app, charged
from tests.chaos.invariants import (
    Findings,
    Ledger,
    check_invocations,
    check_queue,
    check_replay,
    doubts_out_of_place,
)
from tests.gcp.firestore_raw import RawLog, Run, log_problems

EID = "e1"


def numbered(events: list[Event]) -> list[str]:
    return [e.model_copy(update={"seq": n}).model_dump_json() for n, e in enumerate(events, 1)]


def leg_log(second_step: str) -> list[Event]:
    """The ``leg`` flow's log: a reserve at step 1, a charge at ``second_step``, the end."""
    key = f"{EID}:{second_step}"
    return [
        ExecutionStarted(execution_id=EID, flow="leg", input={}),
        ExecutionClaimed(holder="h", until=1.0),
        EffectCompleted(step_id="1", effect="chaos.reserve", output={"reserved": 0, "key": "k"}),
        EffectStarted(step_id=second_step, effect="chaos.charge", idempotency_key=key),
        EffectCompleted(step_id=second_step, effect="chaos.charge", output=charged(key)),
        ExecutionCompleted(output={"leg": [{"reserved": 0, "key": "k"}, charged(key)]}),
    ]


def raw(events: list[Event], split: int | None = None) -> RawLog:
    """A raw log: the start on the document, the rest as pages (or, from ``split`` on, an
    end riding the document)."""
    bodies = numbered(events)
    log = RawLog(EID, {"status": "completed"}, [Run("start", 1, bodies[:1])])
    stop = len(bodies) if split is None else split
    for n in range(1, stop):
        log.runs.append(Run(f"page {n + 1}", n + 1, [bodies[n]]))
    if split is not None:
        log.runs.append(Run("end", split + 1, bodies[split:]))
    return log


def test_a_forked_log_is_seen_and_a_whole_one_is_not() -> None:
    events = leg_log("2")
    assert log_problems(raw(events)) == []
    assert log_problems(raw(events, split=4)) == []  # the end riding the document
    forked = raw(events, split=4)
    again = json.loads(numbered(events)[4]) | {"output": {"charge": "twice"}}
    forked.runs.append(Run("page 5", 5, [json.dumps(again), numbered(events)[5]]))
    problems = log_problems(forked)
    assert any("seq 5 stored twice" in p for p in problems), problems
    assert any("2 terminal events" in p for p in problems), problems


async def test_step_ids_a_replay_would_not_give_are_seen() -> None:
    for second, broken in (("2", False), ("5", True)):
        found = Findings()
        log = raw(leg_log(second))
        await check_replay(app, log, log.events(), found)
        assert bool(found.violations) is broken, (second, found.summary())


def ledger(*lines: tuple[str, str, str, str, float]) -> Ledger:
    keys = ("key", "effect", "phase", "who", "t")
    return Ledger([dict(zip(keys, line, strict=True)) for line in lines])


def test_a_charge_made_twice_or_under_a_stray_key_is_seen() -> None:
    log = raw(leg_log("2"))
    once = ledger((f"{EID}:2", "chaos.charge", "start", "w0.1", 1.0))
    found = Findings()
    check_invocations([log], once, found)
    assert found.count == 0, found.summary()
    twice = ledger(*[(f"{EID}:2", "chaos.charge", "start", w, 1.0) for w in ("w0.1", "w1.1")])
    stray = ledger((f"{EID}:9", "chaos.reserve", "start", "w0.1", 1.0))
    for bad, invariant in (
        (twice, "non-idempotent: once per key (+ not_performed verdicts)"),
        (stray, "invoked only under keys of recorded steps"),
    ):
        found = Findings()
        check_invocations([log], bad, found)
        assert list(found.violations) == [invariant], found.summary()


def test_a_not_performed_verdict_allows_one_more_charge() -> None:
    key = f"{EID}:2"
    events = [
        *leg_log("2")[:4],
        EffectInDoubt(step_id="2", effect="chaos.charge"),
        EffectVerdict(step_id="2", verdict="not_performed", by="ops", episode=5),
        EffectStarted(step_id="2", effect="chaos.charge", attempt=2, idempotency_key=key),
        *leg_log("2")[4:],
    ]
    two = ledger(*[(key, "chaos.charge", "start", w, 1.0) for w in "ab"])
    found = Findings()
    check_invocations([raw(events)], two, found)
    assert found.count == 0, found.summary()
    runs: list[dict[str, Any]] = raw(events).events()
    assert doubts_out_of_place(runs) == []
    parked_twice = [*runs[:5], runs[4] | {"seq": 6}]
    assert doubts_out_of_place(parked_twice) == ["#6 in doubt over a doubt intent"]


def test_a_queue_over_its_limit_is_seen_and_a_killed_invocation_ends_at_the_kill() -> None:
    def lines(eid: str, start: float, end: float | None) -> list[tuple[str, str, str, str, float]]:
        out = [(f"{eid}:1", "chaos.reserve", "start", f"w.{eid}", start)]
        return out if end is None else [*out, (f"{eid}:1", "chaos.reserve", "end", f"w.{eid}", end)]

    queued = {"a", "b", "c"}
    within = ledger(*lines("a", 0, 2), *lines("b", 1, 3), *lines("c", 2.5, 4))
    found = Findings()
    assert check_queue(within, queued, {}, 2, found) == 2 and found.count == 0
    over = ledger(*lines("a", 0, 2), *lines("b", 1, 3), *lines("c", 1.5, 4))
    found = Findings()
    assert check_queue(over, queued, {}, 2, found) == 3 and found.count > 0
    killed = ledger(*lines("a", 0, None), *lines("b", 1, 3), *lines("c", 2.5, 4))
    found = Findings()
    assert check_queue(killed, queued, {"w.a": 2.0}, 2, found) == 2, found.summary()
    assert check_queue(killed, queued, {}, 2, Findings()) == 3  # never killed: still running
