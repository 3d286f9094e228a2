"""Retention: finished executions older than a period are deleted with their blobs.

:func:`purge_finished` drives :meth:`~loom.store.base.EventStore.purge` batch after batch,
deleting each execution's blobs (``{execution_id}/…``) before the execution itself: once the
execution is gone nothing would find them again. It stops when the scan is complete or the
time budget is spent; a later run finds whatever is left, so an interrupted purge loses
nothing and a repeated one deletes nothing twice.

It is called by ``POST /tasks/purge`` (Cloud Scheduler, ``LOOM_RETENTION``) and by
``loom purge --older-than 30d`` for the embedded store.

Where the dispatcher carries jobs (:mod:`loom.kernel.jobs`), ``POST /tasks/purge`` runs
:func:`start_purge` instead: one *purge job* per shard of the store, all at once on the
maintenance queues. Each deletes its shard's finished executions (the store deletes several
at once) for up to its budget, then enqueues its own continuation from its cursor, so the
purge keeps up however many executions finish a day: its rate grows with the shards, not
with one request's time limit.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from loom.blobs import BlobStore, validate_prefix
from loom.errors import InputError
from loom.kernel import jobs
from loom.kernel.primitive import Primitive
from loom.store.base import EventStore, ListCursor

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

log = logging.getLogger("loom.retention")

DEFAULT_RETENTION = "30d"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (bare: seconds).

    Raises:
        InputError: Not such an age, or zero.
    """
    match = _AGE.match(text)
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else 0.0
    if seconds <= 0:
        raise InputError(
            f"retention age must be a positive number with a unit s, m, h, d or w "
            f"(e.g. 30d), got {text!r}"
        )
    return seconds


@dataclass(frozen=True, slots=True)
class PurgeSummary:
    """What :func:`purge_finished` did.

    Attributes:
        purged: Executions deleted.
        blobs: Blobs deleted with them.
        batches: Store batches run.
        complete: Every execution old enough was looked at (False: the budget ran out).
        finished_before: The cutoff, epoch seconds.
    """

    purged: int
    blobs: int
    batches: int
    complete: bool
    finished_before: float

    def to_json(self) -> dict[str, Any]:
        """The summary as a JSON object."""
        return asdict(self)


async def purge_finished(
    store: EventStore,
    blobs: BlobStore | None,
    *,
    older_than: float,
    batch: int = 200,
    budget: float | None = None,
    clock: Callable[[], float] = time.time,
    timer: Callable[[], float] = time.monotonic,
) -> PurgeSummary:
    """Delete executions that finished more than ``older_than`` seconds ago, with their blobs.

    Args:
        store: Where the executions live.
        blobs: Their blob store, if any.
        older_than: Seconds since an execution finished before it is deleted.
        batch: Executions looked at per store call.
        budget: Seconds to spend at most (then stop; the next run continues).
        clock: Wall-clock seconds, for the cutoff.
        timer: Monotonic seconds, for the budget.
    """
    cutoff = clock() - older_than
    started = timer()
    counts = {"purged": 0, "blobs": 0, "batches": 0}

    async def delete_blobs(execution_id: str) -> None:
        counts["blobs"] += await _delete_blobs(blobs, execution_id)

    after: ListCursor | None = None
    while True:
        report = await store.purge(cutoff, limit=batch, after=after, on_delete=delete_blobs)
        counts["batches"] += 1
        counts["purged"] += len(report.purged)
        after = report.cursor
        if after is None or (budget is not None and timer() - started >= budget):
            break
    summary = PurgeSummary(**counts, complete=after is None, finished_before=cutoff)
    log.info("purge deleted %d execution(s) and %d blob(s)", summary.purged, summary.blobs)
    return summary


async def _delete_blobs(blobs: BlobStore | None, execution_id: str) -> int:
    if blobs is None:
        return 0
    if "/" in execution_id:
        # Its prefix would also cover the blobs of another execution named "{id}/…": keep
        # them (an object store's lifecycle rule removes them in time).
        log.warning("blobs of %s kept: its id contains '/'", execution_id)
        return 0
    try:
        prefix = validate_prefix(f"{execution_id}/")
    except ValueError:
        return 0  # no blob can have been written under an id that is not a valid key
    return await blobs.delete_prefix(prefix)


async def start_purge(
    runtime: Runtime, *, older_than: float, budget: float, clock: Callable[[], float] = time.time
) -> dict[str, Any]:
    """Enqueue one purge job per shard (keyed by the cutoff's hour: a repeated call that
    hour adds none); what it enqueued."""
    cutoff = clock() - older_than
    shards = await runtime.store.shard_count()
    hour = int(cutoff // 3600)
    for shard in range(shards):
        args = {"shard": shard, "before": cutoff, "after": None, "budget": budget, "part": 0}
        await jobs.enqueue(runtime, jobs.Job("purge", f"{shard}@{hour}:0", args, shard=shard))
    return {"shards": shards, "finished_before": cutoff, "jobs": shards}


async def run_purge_job(runtime: Runtime, job: jobs.Job) -> dict[str, Any]:
    """A purge job: its shard's finished executions from its cursor on, for up to its
    budget; then the continuation job, from where it stopped (idempotent and resumable: a
    repeated job finds what is left)."""
    args = job.args
    shard, before, budget = int(args["shard"]), float(args["before"]), float(args["budget"])
    after = _cursor(args.get("after"))
    blobs = runtime.payloads.blobs
    deleted = {"purged": 0, "blobs": 0}

    async def delete_blobs(execution_id: str) -> None:
        deleted["blobs"] += await _delete_blobs(blobs, execution_id)

    started = time.monotonic()
    while True:
        report = await runtime.store.purge(
            before, limit=PURGE_PAGE, after=after, on_delete=delete_blobs, shard=shard
        )
        deleted["purged"] += len(report.purged)
        after = report.cursor
        if after is None or time.monotonic() - started >= budget:
            break
    if after is not None:
        part = int(args.get("part") or 0) + 1
        more = {**args, "after": list(after), "part": part}
        key = f"{job.key.rsplit(':', 1)[0]}:{part}"
        await jobs.enqueue(runtime, jobs.Job("purge", key, more, shard=shard))
    log.info("purge of shard %d deleted %d execution(s)", shard, deleted["purged"])
    return {"shard": shard, **deleted, "complete": after is None}


PURGE_PAGE = 200


def _cursor(raw: object) -> ListCursor | None:
    if not isinstance(raw, list | tuple) or len(raw) != 2:  # pyright: ignore[reportUnknownArgumentType]
        return None
    created, eid = raw  # pyright: ignore[reportUnknownVariableType]
    return (float(created), str(eid))  # pyright: ignore[reportUnknownArgumentType]


PRIMITIVE = Primitive("retention", jobs={"purge": run_purge_job})
"""The purge's job, installed with the app's primitives."""
