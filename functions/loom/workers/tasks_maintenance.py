"""The tasks service's maintenance routes, for Cloud Scheduler: ``POST /tasks/sweep`` and
``POST /tasks/purge`` (mounted by :class:`~loom.workers.tasks_target.TasksHandler`).

The sweep keeps the promise that nothing is stranded: an execution that is neither finished
nor waiting has a pending task or a live claim. It pages through every running execution,
oldest first, and redispatches those whose claim expired (a worker died and the task's
retries ran out) and timers overdue by more than the grace period (their task was lost).

The purge deletes finished executions older than the retention period with their events,
snapshots and blobs (see :mod:`loom.ops.retention`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from loom.dispatch.base import Dispatcher
from loom.errors import ConfigurationError, InputError
from loom.ids import id_problem
from loom.kernel.claims import claim_is_live
from loom.ops.retention import DEFAULT_RETENTION, PurgeSummary, parse_age, purge_finished
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
    dispatcher = require_dispatcher(runtime)
    now = clock()
    window = int(now // grace)
    redispatched: list[str] = []
    async for row in _running_oldest_first(runtime.store, limit):
        if now - row.updated_at < grace:
            continue  # the summary's time lags the log's, never leads it: progress is recent
        if id_problem(row.execution_id) is not None:
            continue  # stored before the id rule: the store refuses it now
        state = await runtime.load_state(row.execution_id)
        stale = now - state.updated_at >= grace
        if state.status != "running" or not stale:
            continue
        if claim_is_live(state.claim, now):
            continue
        package = ExecutionPackage(execution_id=state.execution_id, flow=state.flow, reason="sweep")
        await dispatcher.dispatch(package, f"{state.execution_id}:{state.last_seq}:sweep@{window}")
        redispatched.append(state.execution_id)
    timers = 0
    for row in await runtime.store.list("suspended", due_before=now - grace, limit=limit):
        if row.parked_reason is not None or row.wake_at is None or id_problem(row.execution_id):
            continue
        package = ExecutionPackage(execution_id=row.execution_id, flow=row.flow, reason="timer")
        await dispatcher.dispatch(package, f"{row.execution_id}:{row.last_seq}:sweep@{window}")
        redispatched.append(row.execution_id)
        timers += 1
    log.info(
        "sweep redispatched %d execution(s), %d overdue timer(s)",
        len(redispatched) - timers,
        timers,
    )
    return {"redispatched": redispatched, "timers": timers}


async def _running_oldest_first(store: EventStore, page: int) -> AsyncIterator[ExecutionSummary]:
    after: ListCursor | None = None
    while True:
        rows = await store.list("running", limit=page, oldest_first=True, after=after)
        for row in rows:
            yield row
        if len(rows) < page:
            return
        after = rows[-1].cursor


# -- /tasks/purge ----------------------------------------------------------------------------


async def purge(runtime: Runtime, env: Mapping[str, str] | None = None) -> PurgeSummary:
    """Delete executions finished longer ago than ``LOOM_RETENTION`` (default 30d), with
    their blobs, for at most ``LOOM_PURGE_BUDGET`` seconds (default 240; the next run goes on).

    Raises:
        ConfigurationError: A malformed setting.
    """
    env = os.environ if env is None else env
    raw_budget = env.get("LOOM_PURGE_BUDGET") or "240"
    try:
        older_than = parse_age(env.get("LOOM_RETENTION") or DEFAULT_RETENTION)
        budget = float(raw_budget)
    except (InputError, ValueError) as exc:
        raise ConfigurationError(f"LOOM_RETENTION / LOOM_PURGE_BUDGET: {exc}") from exc
    return await purge_finished(
        runtime.store, runtime.payloads.blobs, older_than=older_than, budget=budget
    )
