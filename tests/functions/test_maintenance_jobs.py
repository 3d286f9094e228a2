"""The tasks service's maintenance where the dispatcher carries jobs (Cloud Tasks): the routes
fan out one job per shard; a purge job deletes what it can in its budget and enqueues its
own continuation from its cursor; a sweep job sweeps its shard; a schedule shard's pass of a
minute starts its ticks without reading first, once however often it runs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from loom.dispatch.base import Dispatcher
from loom.errors import InputError
from loom.kernel.jobs import Job
from loom.ops.retention import run_purge_job, start_purge
from loom.primitives.schedules import SPREAD, live, run_schedules_job, start_schedules
from loom.runtime import Runtime
from loom.store import EventStore, SqliteEventStore
from loom.testing import FakeClock
from loom.wire import ExecutionPackage
from loom.workers.tasks_maintenance import start_sweep
from tests.flowcontrol import schedule_app
from tests.functions.test_tasks_target import app


class Jobs(Dispatcher):
    """Records dispatches and jobs instead of delivering them (Cloud Tasks would)."""

    carries_jobs = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, float | None]] = []
        self.jobs: list[tuple[Job, float | None]] = []

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        self.sent.append((dispatch_id, not_before))

    async def dispatch_job(self, job: Job, not_before: float | None = None) -> None:
        self.jobs.append((job, not_before))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    s = SqliteEventStore(tmp_path / "t.db")
    yield s
    await s.aclose()


def _jobs(rt: Runtime) -> Jobs:
    assert isinstance(rt.dispatcher, Jobs)
    return rt.dispatcher


async def _finished(rt: Runtime, n: int) -> list[str]:
    ids = [f"done-{i}" for i in range(n)]
    for eid in ids:
        await rt.start("echo", "x", execution_id=eid, run=False)
        await rt.execute(ExecutionPackage(execution_id=eid))
        assert (await rt.result(eid)).status == "completed"
    return ids


async def test_a_purge_job_continues_itself_from_its_cursor(store: EventStore) -> None:
    rt = Runtime(app, store, dispatcher=Jobs())
    ids = await _finished(rt, 5)
    done = await start_purge(rt, older_than=-60.0, budget=0.0)
    [(first, _)] = _jobs(rt).jobs  # one shard on SQLite: one job
    assert (done["shards"], first.kind, first.shard) == (1, "purge", 0)
    # A budget of nothing: one page each run (the page of the engine is 200: make it 2).
    import loom.ops.retention as retention

    retention.PURGE_PAGE, page = 2, retention.PURGE_PAGE
    try:
        job, runs = first, 0
        while True:
            runs += 1
            result = await run_purge_job(rt, job)
            if result["complete"]:
                break
            job = _jobs(rt).jobs[-1][0]
            assert job.args["after"] is not None and job.key.endswith(f":{runs}")
    finally:
        retention.PURGE_PAGE = page
    assert runs >= 3  # five executions, two a page
    assert await rt.store.list() == []
    assert len({j.job_id for j, _ in _jobs(rt).jobs}) == len(_jobs(rt).jobs)  # each its own id
    del ids


async def test_the_sweep_route_enqueues_a_job_per_shard_once_a_window(store: EventStore) -> None:
    clock = FakeClock(time.time())  # (the store stamps summaries with the wall clock)
    rt = Runtime(app, store, dispatcher=Jobs(), clock=clock)
    await rt.start("echo", "x", execution_id="stuck", run=False)  # never dispatched
    first = await start_sweep(rt, grace=60.0, clock=clock)
    second = await start_sweep(rt, grace=60.0, clock=clock)  # the same window: the same job
    [(job, _), (again, _)] = _jobs(rt).jobs
    assert first["shards"] == second["shards"] == 1 and job.job_id == again.job_id
    clock.now += 120  # past the grace: the execution looks stranded
    swept = await rt.run_job(Job("sweep", "0@late", {"shard": 0, "grace": 60.0, "now": clock.now}))
    assert swept["redispatched"] == 1
    assert _jobs(rt).sent[-1][0].startswith("stuck:1:sweep@")


async def test_a_schedule_pass_starts_its_minute_without_reading_and_only_once(
    store: EventStore,
) -> None:
    clock = FakeClock(datetime(2026, 5, 4, 10, 0, 12, tzinfo=UTC).timestamp())
    rt = Runtime(schedule_app.app, store, dispatcher=Jobs(), clock=clock)
    await live(rt, clock.now - 86400)  # declared a day before (first seen by a pass then)
    asked = await start_schedules(rt, grace=300.0)
    jobs = _jobs(rt).jobs
    minute = int(clock.now // 60) * 60
    assert asked == {"shards": 3, "minutes": 6}
    assert len(jobs) == 3 * 6 and len({j.job_id for j, _ in jobs}) == len(jobs)
    for job, due in jobs:  # this minute's passes are spread over it; older ones run at once
        if job.args["minute"] == minute:
            assert due is None or minute <= due < minute + SPREAD
        else:
            assert due is None
    reads: list[str] = []
    summary = store.summary

    async def counting(execution_id: str) -> Any:
        reads.append(execution_id)
        return await summary(execution_id)

    store.summary = counting  # type: ignore[method-assign]
    this_minute = [j for j, _ in jobs if j.args["minute"] == minute]
    results = [await run_schedules_job(rt, j) for j in this_minute]
    started = sum(r["started"] for r in results)
    # Each schedule's 10:00 tick (every-5, hourly, minutely in Asia/Kolkata), created without
    # a read; and the hourly's three catch-up ticks before the grace window, read first.
    assert started == 3 + 3
    hourly = [f"schedule:hourly@2026-05-04T0{h}:00:00Z" for h in (7, 8, 9)]
    assert reads == hourly
    again = [await run_schedules_job(rt, j) for j in this_minute]  # a duplicate delivery
    assert sum(r["started"] for r in again) == 0
    rows = await rt.store.list(limit=100)
    assert len({r.execution_id for r in rows}) == len(rows)


async def test_a_job_of_an_unknown_kind_is_refused(store: EventStore) -> None:
    rt = Runtime(app, store, dispatcher=Jobs())
    with pytest.raises(InputError, match="unknown job kind"):
        await rt.run_job(Job("nonsense", "k"))
    with pytest.raises(InputError, match="unknown job kind"):
        Job.from_json({"kind": "nonsense", "key": "k", "args": {}, "shard": 0})
    with pytest.raises(InputError, match="non-negative"):
        Job.from_json({"kind": "purge", "key": "k", "args": {}, "shard": -1})
