"""The sweep, shard by shard: what keeps the promise that nothing is stranded.

A shard's sweep (:func:`sweep_shard`; the ``sweep`` job, :func:`run_sweep_job`) pages
through the shard's running executions oldest first, loads only those whose summary shows
no progress for the grace period, many at once, and redispatches those whose claim is not
live (a worker died and the task's retries ran out); wakes the executions whose inbox holds
a delivery older than the grace period (the wake of its post was lost); and redispatches
timers overdue by more than the grace period (their task was lost). ``POST /tasks/sweep``
(:mod:`loom.workers.tasks_maintenance`) runs every shard's, or one job per shard.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from loom.dispatch.base import Dispatcher
from loom.errors import ConfigurationError, UnknownExecutionError
from loom.ids import id_problem
from loom.kernel import jobs
from loom.kernel.claims import claim_is_live
from loom.kernel.fold import ExecutionState
from loom.kernel.inbox import WAKE_MARK
from loom.kernel.primitive import Primitive
from loom.store.base import EventStore, ExecutionSummary, ListCursor
from loom.wire import ExecutionPackage

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

log = logging.getLogger("loom.tasks")

LOADS: Final = 32  # executions a sweep loads at once


def require_dispatcher(runtime: Runtime) -> Dispatcher:
    """The runtime's dispatcher; a sweep (the tasks target) cannot work without one.

    Raises:
        ConfigurationError: ``LOOM_DISPATCH`` is not set.
    """
    if runtime.dispatcher is None:
        raise ConfigurationError("the tasks target needs a dispatcher (LOOM_DISPATCH)")
    return runtime.dispatcher


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


async def _wake_stranded_inboxes(
    runtime: Runtime, shard: int, before: float, window: int, limit: int
) -> list[str]:
    """Wake the executions of the shard whose inbox holds a delivery older than ``before``
    (the wake of its post was lost): ``loom.kernel.inbox``."""
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


PRIMITIVE = Primitive("sweep", jobs={"sweep": run_sweep_job})
"""The sweep's job, installed with the app's primitives."""
