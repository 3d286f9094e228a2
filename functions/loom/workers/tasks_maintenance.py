"""The tasks service's maintenance routes, for Cloud Scheduler: ``POST /tasks/sweep`` and
``POST /tasks/purge`` (mounted by :class:`~loom.workers.tasks_target.TasksHandler`).

The sweep keeps the promise that nothing is stranded: an execution that is neither finished
nor waiting has a pending task or a live claim. It pages through every running execution,
oldest first, and redispatches those whose claim expired (a worker died and the task's
retries ran out) and timers overdue by more than the grace period (their task was lost).

The purge deletes finished executions older than the retention period with their events,
snapshots and blobs (see :mod:`loom.retention`).

Where the dispatcher carries jobs (Cloud Tasks), both routes only fan out: one job per
shard of the store (:mod:`loom.jobs`), each a short request of its own on the maintenance
queues, so a sweep or a purge grows with the deployment instead of overrunning one request.
A sweep job reads its shard's running executions from their summaries and loads only
those that look stranded, many at once; a purge job deletes its shard's finished
executions for up to ``LOOM_PURGE_BUDGET`` seconds and enqueues its own continuation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from loom import jobs
from loom.claims import claim_is_live
from loom.dispatch.base import Dispatcher
from loom.errors import ConfigurationError, InputError, UnknownExecutionError
from loom.fold import ExecutionState
from loom.ids import id_problem
from loom.inbox import WAKE_MARK
from loom.retention import (
    DEFAULT_RETENTION,
    PurgeSummary,
    parse_age,
    purge_finished,
    start_purge,
)
from loom.runtime import Runtime
from loom.store.base import EventStore, ExecutionSummary, ListCursor
from loom.wire import ExecutionPackage

log = logging.getLogger("loom.tasks")

DEFAULT_SWEEP_GRACE = 60.0


def require_dispatcher(runtime: Runtime) -> Dispatcher:
    """The runtime's dispatcher; the tasks target cannot work without one.

    Raises:
        ConfigurationError: ``LOOM_DISPATCH`` is not set.
    """
    if runtime.dispatcher is None:
        raise ConfigurationError("the tasks target needs a dispatcher (LOOM_DISPATCH)")
    return runtime.dispatcher


# -- /tasks/sweep ----------------------------------------------------------------------------


async def sweep(
    runtime: Runtime,
    *,
    grace: float = DEFAULT_SWEEP_GRACE,
    clock: Callable[[], float] = time.time,
    limit: int = 1000,
) -> dict[str, Any]:
    """Redispatch what would otherwise be stranded; returns counts and the ids redispatched.

    Args:
        runtime: Whose store is swept and whose dispatcher redispatches.
        grace: Seconds an execution may sit without progress (or a timer stay overdue)
            before it counts as stranded; also the window of the sweep's dispatch ids, so
            one execution gets at most one sweep task per window.
        clock: Wall-clock seconds.
        limit: Executions read per page: running ones are paged through, oldest first,
            to the end (the oldest are the likeliest to be stranded); overdue timers are
            the ``limit`` earliest due.
    """
    require_dispatcher(runtime)
    now = clock()
    redispatched: list[str] = []
    timers = 0
    for shard in range(await runtime.store.shard_count()):
        found = await sweep_shard(runtime, shard, grace=grace, now=now, limit=limit)
        redispatched += found["redispatched"]
        timers += found["timers"]
    await runtime.store.upkeep()
    log.info(
        "sweep redispatched %d execution(s), %d overdue timer(s)",
        len(redispatched) - timers,
        timers,
    )
    return {"redispatched": redispatched, "timers": timers}


async def sweep_shard(
    runtime: Runtime, shard: int, *, grace: float, now: float, limit: int = 1000
) -> dict[str, Any]:
    """The sweep of one shard of the store (see :func:`sweep`): its running executions
    oldest first, loaded only when their summary says they made no progress for ``grace``
    seconds, :data:`LOADS` at once; then its overdue timers."""
    dispatcher = require_dispatcher(runtime)
    window = int(now // grace)
    redispatched: list[str] = []
    async for rows in _stale_running(runtime.store, shard, limit, now - grace):
        for state in await _load(runtime, [r.execution_id for r in rows]):
            stale = now - state.updated_at >= grace
            if state.status != "running" or not stale or claim_is_live(state.claim, now):
                continue
            eid = state.execution_id
            package = ExecutionPackage(execution_id=eid, flow=state.flow, reason="sweep")
            await dispatcher.dispatch(package, f"{eid}:{state.last_seq}:sweep@{window}")
            redispatched.append(eid)
    redispatched += await _wake_stranded_inboxes(runtime, shard, now - grace, window, limit)
    timers = 0
    rows = await runtime.store.list_shard(shard, "suspended", due_before=now - grace, limit=limit)
    for row in rows:
        if row.parked_reason is not None or row.wake_at is None or id_problem(row.execution_id):
            continue
        package = ExecutionPackage(execution_id=row.execution_id, flow=row.flow, reason="timer")
        await dispatcher.dispatch(package, f"{row.execution_id}:{row.last_seq}:sweep@{window}")
        redispatched.append(row.execution_id)
        timers += 1
    return {"redispatched": redispatched, "timers": timers}


LOADS = 32  # executions a sweep loads at once


async def _wake_stranded_inboxes(
    runtime: Runtime, shard: int, before: float, window: int, limit: int
) -> list[str]:
    """Wake the executions of the shard whose inbox holds a delivery older than ``before``
    (the wake of its post was lost): ``loom.inbox``."""
    inbox = runtime.store.inbox()
    if inbox is None:
        return []
    found = await inbox.stranded(before, shard, await runtime.store.shard_count(), limit)
    for eid in found:
        dispatch_id = f"{eid}{WAKE_MARK}sweep{window}"
        await runtime._dispatch(eid, "", "sweep", dispatch_id)  # pyright: ignore[reportPrivateUsage]
    return found


async def _stale_running(
    store: EventStore, shard: int, page: int, before: float
) -> AsyncIterator[list[ExecutionSummary]]:
    """Pages of one shard's running executions, oldest first, those whose summary shows no
    progress since ``before`` (the summary's time lags the log's, never leads it)."""
    after: ListCursor | None = None
    while True:
        rows = await store.list_shard(shard, "running", limit=page, oldest_first=True, after=after)
        stale = [r for r in rows if r.updated_at <= before and id_problem(r.execution_id) is None]
        for start in range(0, len(stale), LOADS):
            yield stale[start : start + LOADS]
        if len(rows) < page:
            return
        after = rows[-1].cursor


async def _load(runtime: Runtime, ids: list[str]) -> list[ExecutionState]:
    """The states of ``ids`` in one bulk read; one by one when one of them is gone (purged
    or deleted since it was listed), leaving it out."""
    try:
        logs = await runtime.store.load_many(ids)
        return [(await runtime.fold_loaded(e, x))[0] for e, x in zip(ids, logs, strict=True)]
    except UnknownExecutionError:
        states: list[ExecutionState] = []
        for eid in ids:
            with contextlib.suppress(UnknownExecutionError):
                states.append(await runtime.load_state(eid))
        return states


async def start_sweep(
    runtime: Runtime, *, grace: float, clock: Callable[[], float] = time.time
) -> dict[str, Any]:
    """``POST /tasks/sweep`` where jobs travel: one sweep job per shard (keyed by the
    window, so a repeated call adds none), and the store's upkeep."""
    now = clock()
    window = int(now // grace)
    shards = await runtime.store.shard_count()
    for shard in range(shards):
        args = {"shard": shard, "grace": grace, "now": now}
        await jobs.enqueue(runtime, jobs.Job("sweep", f"{shard}@{window}", args, shard=shard))
    done = await runtime.store.upkeep()
    return {"shards": shards, "window": window, **done}


async def run_sweep_job(runtime: Runtime, job: jobs.Job) -> dict[str, Any]:
    """A sweep job: :func:`sweep_shard` of the job's shard."""
    args = job.args
    found = await sweep_shard(
        runtime, int(args["shard"]), grace=float(args["grace"]), now=float(args["now"])
    )
    log.info(
        "sweep of shard %s redispatched %d execution(s)", args["shard"], len(found["redispatched"])
    )
    return {"redispatched": len(found["redispatched"]), "timers": found["timers"]}


# -- /tasks/purge ----------------------------------------------------------------------------


def _purge_settings(env: Mapping[str, str] | None) -> tuple[float, float]:
    env = os.environ if env is None else env
    raw_budget = env.get("LOOM_PURGE_BUDGET") or "240"
    try:
        older_than = parse_age(env.get("LOOM_RETENTION") or DEFAULT_RETENTION)
        budget = float(raw_budget)
    except (InputError, ValueError) as exc:
        raise ConfigurationError(f"LOOM_RETENTION / LOOM_PURGE_BUDGET: {exc}") from exc
    return older_than, budget


async def purge(runtime: Runtime, env: Mapping[str, str] | None = None) -> PurgeSummary:
    """Delete executions finished longer ago than ``LOOM_RETENTION`` (default 30d), with
    their blobs, for at most ``LOOM_PURGE_BUDGET`` seconds (default 240; the next run goes on).

    Raises:
        ConfigurationError: A malformed setting.
    """
    older_than, budget = _purge_settings(env)
    return await purge_finished(
        runtime.store, runtime.payloads.blobs, older_than=older_than, budget=budget
    )


async def purge_route(runtime: Runtime, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``POST /tasks/purge``: fanned out into one purge job per shard where jobs travel
    (:func:`loom.retention.start_purge`), else the purge itself (:func:`purge`).

    Raises:
        ConfigurationError: A malformed setting.
    """
    older_than, budget = _purge_settings(env)
    if jobs.carries_jobs(runtime):
        return await start_purge(runtime, older_than=older_than, budget=budget)
    return (await purge(runtime, env)).to_json()
