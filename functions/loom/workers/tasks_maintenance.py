"""The tasks service's maintenance routes, for Cloud Scheduler: ``POST /tasks/sweep`` and
``POST /tasks/purge`` (mounted by :class:`~loom.workers.tasks_target.TasksHandler`).

The sweep keeps the promise that nothing is stranded: an execution that is neither finished
nor waiting has a pending task or a live claim. It pages through every running execution,
oldest first, and redispatches those whose claim expired (a worker died and the task's
retries ran out) and timers overdue by more than the grace period (their task was lost).

The purge deletes finished executions older than the retention period with their events,
snapshots and blobs (see :mod:`loom.ops.retention`).

Where the dispatcher carries jobs (Cloud Tasks), both routes only fan out: one job per
shard of the store (:mod:`loom.kernel.jobs`), each a short request of its own on the maintenance
queues, so a sweep or a purge grows with the deployment instead of overrunning one request.
A sweep job reads its shard's running executions from their summaries and loads only
those that look stranded, many at once; a purge job deletes its shard's finished
executions for up to ``LOOM_PURGE_BUDGET`` seconds and enqueues its own continuation.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from loom.errors import ConfigurationError, InputError
from loom.kernel import jobs
from loom.ops.retention import (
    DEFAULT_RETENTION,
    PurgeSummary,
    parse_age,
    purge_finished,
    start_purge,
)
from loom.ops.sweep import require_dispatcher, sweep_shard
from loom.runtime import Runtime

log = logging.getLogger("loom.tasks")

DEFAULT_SWEEP_GRACE = 60.0


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
