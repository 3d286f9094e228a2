"""What a chaos run must not break, checked on the raw Firestore documents and the ledger.

Nothing here asks the store: the logs are read from the execution documents and their
event pages as stored (:mod:`tests.gcp.firestore_raw`), so a forked log cannot hide behind
the store's own merge. The ledger is every effect invocation, as the effects wrote it.

Checked, per execution: one gap-free log, at most one terminal event and nothing after it;
step ids as a replay of the flow numbers them; non-idempotent invocations at most once per
key unless a ``not_performed`` verdict allowed another; idempotent ones only under keys of
steps the log records; each message received once; each child result delivered once; the
execution terminal, or parked with a reason. Across executions: the queue's concurrency.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.cloud import firestore

from loom import Loom
from loom.errors import LoomError
from loom.events import EVENT_ADAPTER, TERMINAL_TYPES
from loom.testing import replay
from tests.gcp.firestore_raw import RawLog, log_problems, raw_log

FINISHED = {"completed", "failed", "cancelled"}
STEP_EVENTS = {"EffectStarted", "EffectCompleted", "EffectFailed", "EffectInDoubt"}


@dataclass
class Ledger:
    """The ledger's lines, by kind."""

    lines: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path) -> Ledger:
        if not path.exists():
            return cls([])
        text = path.read_text()
        return cls([json.loads(line) for line in text.splitlines() if line.strip()])

    def starts(self) -> Counter[tuple[str, str]]:
        """Invocations per ``(key, effect)``."""
        return Counter((x["key"], x["effect"]) for x in self.lines if x["phase"] == "start")


@dataclass
class Findings:
    """Violations by invariant, with up to a few examples each."""

    checked: Counter[str] = field(default_factory=Counter[str])
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def check(self, invariant: str, ok: bool, example: str) -> None:
        self.checked[invariant] += 1
        if not ok:
            self.violations[invariant].append(example)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def summary(self, examples: int = 3) -> dict[str, Any]:
        return {
            "checked": dict(self.checked),
            "violations": {k: len(v) for k, v in self.violations.items()},
            "examples": {k: v[:examples] for k, v in self.violations.items()},
        }


async def read_all(client: firestore.AsyncClient) -> list[RawLog]:
    """Every execution's raw log (a few at a time)."""
    ids = [doc.id async for doc in client.collection("executions").select([]).stream()]
    logs: list[RawLog] = []
    for start in range(0, len(ids), 32):
        logs += await asyncio.gather(*(raw_log(client, eid) for eid in ids[start : start + 32]))
    return logs


def runs_of(eid: str, events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Events by the key owner of their run: ``eid`` for run 1, ``eid#runN`` after."""
    owner, runs = eid, defaultdict[str, list[dict[str, Any]]](list)
    for event in events:
        if event["type"] == "ExecutionContinued":
            owner = f"{eid}#run{event['run']}"
            continue
        runs[owner].append(event)
    return runs


async def check_log(app: Loom, log: RawLog, found: Findings) -> None:
    eid = log.execution_id
    problems = log_problems(log)
    found.check("one gap-free log, nothing after its end", not problems, f"{eid}: {problems}")
    if problems:
        return
    events = log.events()
    status = log.fields.get("status")
    parked = status == "in_doubt" or log.fields.get("parked_reason") is not None
    found.check(
        "terminal or parked with a reason", status in FINISHED or parked, f"{eid}: {status}"
    )
    if events and events[-1]["type"] in TERMINAL_TYPES:
        await check_replay(app, log, events, found)
    for owner, run in runs_of(eid, events).items():
        wrong = doubts_out_of_place(run)
        found.check("in doubt only over an open intent, once", not wrong, f"{owner}: {wrong}")
    received = Counter(e["message_id"] for e in events if e["type"] == "MessageReceived")
    twice = [m for m, n in received.items() if n > 1]
    found.check("each message received once", not twice, f"{eid}: {twice}")
    child = defaultdict[str, list[str]](list)
    for e in events:
        if e["type"] == "ExecutionResumed" and e["on"] == "loom.child":
            child[e["correlation_key"]].append(f"#{e['seq']} by {e.get('by')}")
    twice = {k: at for k, at in child.items() if len(at) > 1}
    found.check("each child result delivered once", not twice, f"{eid}: {twice}")


def doubts_out_of_place(run: list[dict[str, Any]]) -> list[str]:
    """Where a run parks a step in doubt that has no open intent (its outcome is recorded,
    or it is in doubt already), or records an outcome of a step in doubt without a verdict:
    each a decision appended from a state older than the log it went into."""
    wrong: list[str] = []
    intent: dict[str, str] = {}  # step -> "open", "doubt" or "closed"
    for e in run:
        sid, kind = e.get("step_id"), e["type"]
        if kind == "EffectStarted":
            intent[sid] = "open"
        elif kind == "EffectInDoubt":
            if intent.get(sid) != "open":
                wrong.append(f"#{e['seq']} in doubt over a {intent.get(sid, 'missing')} intent")
            intent[sid] = "doubt"
        elif kind in ("EffectCompleted", "EffectFailed") and sid in intent:
            if intent[sid] == "doubt":
                wrong.append(f"#{e['seq']} {kind} of step {sid} in doubt")
            intent[sid] = "closed"
        elif kind == "EffectVerdict":
            intent[sid] = "closed"
    return wrong


async def check_replay(
    app: Loom, log: RawLog, events: list[dict[str, Any]], found: Findings
) -> None:
    """A replay of the flow over the log numbers its steps as the log does, and ends the
    same way."""
    parsed = [EVENT_ADAPTER.validate_python(e) for e in events]
    try:
        outcome = await replay(app, parsed)
    except LoomError as exc:
        found.check("step ids as a replay numbers them", False, f"{log.execution_id}: {exc}")
        return
    end = events[-1]
    same = outcome.status == {"ExecutionCompleted": "completed"}.get(end["type"], outcome.status)
    if end["type"] == "ExecutionCompleted":
        same = same and outcome.output == end.get("output")
    found.check("step ids as a replay numbers them", same, f"{log.execution_id}: {outcome}")


def check_invocations(logs: Iterable[RawLog], ledger: Ledger, found: Findings) -> None:
    """Every invocation's key names a step its log records with that effect; a
    non-idempotent key is invoked once, plus once per ``not_performed`` verdict."""
    steps: dict[str, set[tuple[str, str]]] = {}
    allowed: Counter[str] = Counter()
    for log in logs:
        for owner, events in runs_of(log.execution_id, log.events()).items():
            steps[owner] = {(e["step_id"], e["effect"]) for e in events if e["type"] in STEP_EVENTS}
            for e in events:
                if e["type"] == "EffectVerdict" and e["verdict"] == "not_performed":
                    allowed[f"{owner}:{e['step_id']}"] += 1
    for (key, effect), times in ledger.starts().items():
        owner, _, sid = key.rpartition(":")
        recorded = (sid, effect) in steps.get(owner, set())
        found.check("invoked only under keys of recorded steps", recorded, f"{key} {effect}")
        if effect == "chaos.charge":
            bound = 1 + allowed[key]
            found.check(
                "non-idempotent: once per key (+ not_performed verdicts)",
                times <= bound,
                f"{key}: {times} invocations, {bound} allowed",
            )


def check_queue(
    ledger: Ledger, queued: set[str], kills: Mapping[str, float], limit: int, found: Findings
) -> int:
    """At no time do more than ``limit`` queued executions have an effect in flight; an
    invocation without an end ended when its worker was killed. Returns the highest seen."""
    edges: list[tuple[float, int, str]] = []
    open_: dict[tuple[str, str], float] = {}
    for line in ledger.lines:
        eid = line["key"].rpartition(":")[0].split("#run")[0]
        if eid not in queued:
            continue
        slot = (line["key"], line["who"])
        if line["phase"] == "start":
            open_[slot] = line["t"]
        elif slot in open_:
            edges += [(open_.pop(slot), 1, eid), (line["t"], -1, eid)]
    for (key, who), began in open_.items():
        eid = key.rpartition(":")[0].split("#run")[0]
        edges += [(began, 1, eid), (kills.get(who, float("inf")), -1, eid)]
    in_flight: Counter[str] = Counter()
    highest = 0
    for at, delta, eid in sorted(edges, key=lambda x: (x[0], x[1])):
        in_flight[eid] += delta
        running = sorted(e for e, n in in_flight.items() if n > 0)
        highest = max(highest, len(running))
        found.check(
            "queue concurrency within its limit",
            len(running) <= limit,
            f"{len(running)} at once at {at:.3f}: {running}",
        )
    return highest


async def check_run(
    app: Loom,
    client: firestore.AsyncClient,
    ledger_path: Path,
    queued: set[str],
    kills: Mapping[str, float],
    queue_limit: int,
) -> tuple[Findings, dict[str, Any]]:
    """Every invariant over every execution of the run's database."""
    logs = await read_all(client)
    ledger = Ledger.read(ledger_path)
    found = Findings()
    for log in logs:
        await check_log(app, log, found)
    check_invocations(logs, ledger, found)
    highest = check_queue(ledger, queued, kills, queue_limit, found)
    statuses = Counter(str(log.fields.get("status")) for log in logs)
    failures = Counter(
        str(e["error"].get("message"))[:120]
        for log in logs
        for e in log.events()[-1:]
        if e["type"] == "ExecutionFailed"
    )
    facts = {
        "executions": len(logs),
        "statuses": dict(statuses),
        "events": sum(len(log.events()) for log in logs),
        "invocations": len([x for x in ledger.lines if x["phase"] == "start"]),
        "queue_highest_in_flight": highest,
        "failures": dict(failures.most_common(5)),
    }
    return found, facts
