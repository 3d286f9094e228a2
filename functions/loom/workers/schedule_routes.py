"""Schedules on the workers: ``GET /schedules`` and the run-time routes (the worker),
``POST /tasks/schedules`` (the tasks service's tick, called by Cloud Scheduler every minute),
and the loop with which ``loom serve`` fires them itself. What a pass does is
:func:`loom.primitives.schedules.fire_due`; the run-time routes are
:mod:`loom.workers.schedule_admin_routes`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from loom.errors import LoomError, StoreError
from loom.kernel.jobs import carries_jobs
from loom.primitives.schedule_admin import Schedules, describe
from loom.primitives.schedules import DEFAULT_GRACE, fire_due, start_schedules

if TYPE_CHECKING:
    from flask import Request

    from loom.runtime import Runtime
    from loom.workers.http_base import Reply, Services

log = logging.getLogger("loom.schedules")
DEFAULT_INTERVAL: Final = 5.0


__all__ = ["describe", "fire_schedules_forever", "list_schedules", "schedule_tick"]


def list_schedules(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /schedules``: every schedule, declared and made at run time, with its next fire
    time."""
    from loom.workers.http_base import run

    return 200, {"schedules": run(Schedules(s.runtime).list())}


def _grace() -> float:
    return float(os.environ.get("LOOM_SCHEDULE_GRACE") or DEFAULT_GRACE)


async def schedule_tick(runtime: Runtime) -> dict[str, Any]:
    """``POST /tasks/schedules``: one pass, what it started or found started already; or,
    where jobs travel, a pass job per schedule shard and minute (``loom.schedules``)."""
    if carries_jobs(runtime):
        return await start_schedules(runtime, grace=_grace())
    fired = await fire_due(runtime, grace=_grace())
    return {"fired": [f.to_json() for f in fired]}


async def fire_schedules_forever(
    get_runtime: Callable[[], Runtime], interval: float | None = None
) -> None:
    """``loom serve``: a pass every ``interval`` seconds (``LOOM_SCHEDULE_INTERVAL``, default
    5) while the process lives; a failed pass is logged and the next one tries again."""
    every = interval or float(os.environ.get("LOOM_SCHEDULE_INTERVAL") or DEFAULT_INTERVAL)
    while True:
        try:
            runtime = (
                get_runtime()
            )  # (a pass even with none declared: some may be made at run time)
            for fired in await fire_due(runtime, grace=_grace()):
                if fired.started or fired.error:
                    log.info("schedule %s tick %s: %s", fired.schedule, fired.tick, fired.status)
        except (LoomError, StoreError) as exc:
            log.error("firing schedules failed: %s", exc)
        await asyncio.sleep(every)
