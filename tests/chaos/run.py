"""One chaos run on the Firestore emulator: real worker processes killed while they work.

``size`` executions of ``tests.chaos.app`` (steps of both kinds, a timer, a child flow, a
message exchange, a ``continue_as_new``; one in ``queued_every`` on a queue of concurrency
2) are
created, then every dispatch, theirs and the engine's own, is delivered to two or three
workers at once (:mod:`tests.chaos.tasks`) while a random worker is SIGKILLed every few
hundred milliseconds and started again (:mod:`tests.chaos.cluster`). The test process is
also the operator: it runs the engine's sweep, settles steps parked in doubt from the
ledger of real invocations (``performed`` when the key's invocations outnumber the
``not_performed`` verdicts it already got, else ``not_performed``), and retries executions
parked as poison. Kills stop when every execution has ended or the chaos time is up; then
the run settles, and the invariants are checked on the raw documents
(:mod:`tests.chaos.invariants`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.cloud import firestore

from loom.errors import LoomError
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from loom.workers.tasks_maintenance import sweep
from loom_gcp.firestore import FirestoreEventStore
from tests.chaos.app import QUEUE, QUEUE_LIMIT, app, charged
from tests.chaos.cluster import Cluster
from tests.chaos.invariants import Findings, Ledger, check_run, runs_of
from tests.chaos.tasks import QueueDispatcher, TaskQueue

log = logging.getLogger("loom.chaos")
PROJECT = "loom-chaos"
OPERATOR = "chaos-operator"


@dataclass
class ChaosConfig:
    """How big and how harsh one run is."""

    executions: int = 40
    steps: int = 6
    workers: int = 3
    copies: tuple[int, int] = (2, 3)
    kill_every: tuple[float, float] = (0.3, 0.8)
    queued_every: int = 5
    arrivals_seconds: float = 20.0
    chaos_seconds: float = 60.0
    settle_seconds: float = 120.0
    sweep_grace: float = 5.0
    seed: int = 0
    threads: int = 8  # each worker's request threads (``THREADS``; two kept for the probes)


@dataclass
class ChaosReport:
    """What happened, and what the invariants found."""

    config: dict[str, Any]
    database: str = ""
    seconds: float = 0.0
    chaos_seconds: float = 0.0
    kills: int = 0
    worker_startup_s: float = 0.0
    operator: Counter[str] = field(default_factory=Counter[str])
    queue: dict[str, int] = field(default_factory=dict[str, int])
    facts: dict[str, Any] = field(default_factory=dict[str, Any])
    findings: dict[str, Any] = field(default_factory=dict[str, Any])
    violations: int = 0


def plan(config: ChaosConfig) -> list[tuple[str, str, dict[str, Any], QueueRef | None]]:
    """``(execution id, flow, input, queue)`` of every root execution."""
    made: list[tuple[str, str, dict[str, Any], QueueRef | None]] = []
    orders: list[dict[str, Any]] = []
    for i in range(config.executions):
        eid = f"c{i:05d}"
        if i % config.queued_every == config.queued_every - 1:
            made.append((eid, "queued", {"steps": config.steps}, QueueRef(QUEUE)))
            continue
        spec: dict[str, Any] = {"steps": config.steps, "kid": i % 2 == 0}
        orders.append(spec | {"id": eid})
        made.append((eid, "order", spec, None))
    for a, b in zip(orders[0::4], orders[1::4], strict=False):  # half of them in pairs
        a_spec = next(m[2] for m in made if m[0] == a["id"])
        b_spec = next(m[2] for m in made if m[0] == b["id"])
        a_spec["partner"], b_spec["partner"] = b["id"], a["id"]
    return made


class Operator:
    """What an operator does during the run: verdicts from the ledger, poison retries."""

    def __init__(self, runtime: Runtime, ledger: Path) -> None:
        self.rt = runtime
        self.ledger = ledger
        self.did: Counter[str] = Counter()
        self._swept = time.monotonic()

    async def tend(self, grace: float) -> None:
        """One round: the sweep (once per ``grace``, as Cloud Scheduler runs it once a
        minute), verdicts for steps in doubt, retries of poison."""
        store = self.rt.store
        try:
            if time.monotonic() - self._swept >= grace:
                self._swept = time.monotonic()
                swept = await sweep(self.rt, grace=grace)
                self.did["swept"] += len(swept["redispatched"])
            starts = Ledger.read(self.ledger).starts()
            for row in await store.list("in_doubt"):
                await self._settle(row.execution_id, starts)
            for row in await store.list("suspended"):
                if row.parked_reason and row.parked_reason.startswith("poison"):
                    await self._retry(row.execution_id)
        except LoomError as exc:  # the store or a race: the next round tries again
            self.did[f"tend failed: {type(exc).__name__}"] += 1

    async def _settle(self, eid: str, starts: Counter[tuple[str, str]]) -> None:
        result = await self.rt.result(eid)
        history = [e.model_dump(mode="json") for e in await self.rt.history(eid)]
        for doubt in result.in_doubt:
            key = doubt.idempotency_key or ""
            owner, _, sid = key.rpartition(":")
            run = runs_of(eid, history).get(owner, [])
            refused = sum(
                1
                for e in run
                if e["type"] == "EffectVerdict"
                and e["step_id"] == sid
                and e["verdict"] == "not_performed"
            )
            performed = starts[(key, doubt.effect)] > refused
            verdict = "performed" if performed else "not_performed"
            try:
                await self.rt.verdict(
                    eid,
                    doubt.step_id,
                    verdict,
                    output=charged(key) if performed else None,
                    by=OPERATOR,
                    episode=doubt.episode,
                )
                self.did[f"verdict {verdict}"] += 1
            except LoomError as exc:
                self.did[f"verdict refused: {type(exc).__name__}"] += 1

    async def _retry(self, eid: str) -> None:
        try:
            await self.rt.retry(eid, by=OPERATOR)
            self.did["poison retried"] += 1
        except LoomError as exc:
            self.did[f"retry refused: {type(exc).__name__}"] += 1


async def _tally(store: FirestoreEventStore) -> tuple[int, int]:
    """How many executions have ended, and how many are neither ended nor parked (from
    counts: a run of thousands is not read whole every second)."""
    counts = await store.count_by_status()
    ended = counts["completed"] + counts["failed"] + counts["cancelled"]
    parked = [r for r in await store.list("suspended", limit=100_000) if r.parked_reason]
    return ended, counts["running"] + counts["suspended"] - len(parked)


async def run_chaos(config: ChaosConfig, workdir: Path) -> ChaosReport:
    """One run (the Firestore emulator is ``FIRESTORE_EMULATOR_HOST``)."""
    database = f"chaos{uuid.uuid4().hex[:16]}"
    report = ChaosReport(asdict(config), database)
    ledger = workdir / "ledger.jsonl"
    cluster: Cluster | None = None
    queue = TaskQueue(
        lambda: cluster.up() if cluster else [], copies=config.copies, seed=config.seed
    )
    env = {
        "LOOM_APP": "tests.chaos.app:app",
        "LOOM_STORE": f"firestore://{PROJECT}/{database}?timeout=5&deadline=20",
        "LOOM_DISPATCH": "inprocess://",
        "LOOM_WORKER": queue.url,
        "LOOM_CHAOS_LEDGER": str(ledger),
        "THREADS": str(config.threads),
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
    }
    cluster = Cluster(config.workers, env, workdir / "logs", seed=config.seed)
    store = FirestoreEventStore(project=PROJECT, database=database)
    arrivals: dict[str, float] = {}
    rt = Runtime(app, store, dispatcher=QueueDispatcher(queue, arrivals))
    operator = Operator(rt, ledger)
    started = time.monotonic()
    try:
        cluster.start()
        await _create(rt, queue, config, arrivals)
        last_arrival = max(arrivals.values())
        cluster.kill_every(*config.kill_every)
        while time.monotonic() - started < config.chaos_seconds:
            await operator.tend(config.sweep_grace)
            ended, unsettled = await _tally(store)
            _progress("chaos", started, ended, unsettled, queue, cluster)
            if unsettled == 0 and time.time() > last_arrival:
                break
            await asyncio.sleep(1.0)
        cluster.calm()
        report.chaos_seconds = time.monotonic() - started
        settle_until = time.monotonic() + config.settle_seconds
        while time.monotonic() < settle_until:
            await operator.tend(config.sweep_grace)
            ended, unsettled = await _tally(store)
            _progress("settle", started, ended, unsettled, queue, cluster)
            if unsettled == 0 and queue.pending(due_by=time.time()) == 0:
                break
            await asyncio.sleep(1.0)
    finally:
        cluster.stop()
        queue.close()
        report.seconds = time.monotonic() - started
        report.kills = len(cluster.kills)
        report.worker_startup_s = statistics.median(cluster.startups or [0.0])
        report.operator = operator.did
        report.queue = dict(queue.stats)
    await _check(report, database, ledger, cluster, config)
    await store.aclose()
    return report


def _progress(
    phase: str, started: float, ended: int, unsettled: int, queue: TaskQueue, cluster: Cluster
) -> None:
    log.info(
        "%s %.0fs: %d executions ended, %d unsettled, %d tasks pending, %d kills",
        phase,
        time.monotonic() - started,
        ended,
        unsettled,
        queue.pending(),
        len(cluster.kills),
    )


async def _create(
    rt: Runtime, queue: TaskQueue, config: ChaosConfig, arrivals: dict[str, float]
) -> None:
    """Create every root execution (so partners exist before either sends), then hand them
    to the queue spread over ``arrivals_seconds``, so the kills meet every stage of them."""
    made = plan(config)
    now, gap = time.time(), config.arrivals_seconds / max(1, len(made))
    for n, (eid, flow, spec, on) in enumerate(made):
        arrivals[eid] = now + n * gap
        await rt.start(flow, spec, execution_id=eid, run=False, queue=on)
    for eid, flow, _, _ in made:
        package = ExecutionPackage(execution_id=eid, flow=flow, reason="start", dispatch_id=eid)
        queue.put(package.model_dump(mode="json"), arrivals[eid])


async def _check(
    report: ChaosReport, database: str, ledger: Path, cluster: Cluster, config: ChaosConfig
) -> None:
    client = firestore.AsyncClient(project=PROJECT, database=database)
    try:
        queued = {eid for eid, flow, _, _ in plan(config) if flow == "queued"}
        found: Findings
        found, report.facts = await check_run(
            app, client, ledger, queued, cluster.kills, QUEUE_LIMIT
        )
    finally:
        await client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]
    report.findings = found.summary()
    report.violations = found.count
