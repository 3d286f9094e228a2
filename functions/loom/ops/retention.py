"""Retention: finished executions older than a period are deleted with their blobs.

:func:`purge_finished` drives :meth:`~loom.store.base.EventStore.purge` batch after batch,
deleting each execution's blobs (``{execution_id}/…``) before the execution itself: once the
execution is gone nothing would find them again. It stops when the scan is complete or the
time budget is spent; a later run finds whatever is left, so an interrupted purge loses
nothing and a repeated one deletes nothing twice.

It is called by ``POST /tasks/purge`` (Cloud Scheduler, ``LOOM_RETENTION``) and by
``loom purge --older-than 30d`` for the embedded store.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loom.blobs import BlobStore, validate_prefix
from loom.errors import InputError
from loom.store.base import EventStore, ListCursor

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
