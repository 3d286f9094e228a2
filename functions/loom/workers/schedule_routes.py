"""Schedules on the workers: ``GET /schedules`` (the worker), ``POST /tasks/schedules`` (the
tasks service's tick, called by Cloud Scheduler every minute), and the loop with which
``loom serve`` fires them itself. What a pass does is :func:`loom.primitives.schedules.fire_due`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from loom.errors import LoomError, StoreError
from loom.kernel.jobs import carries_jobs
from loom.primitives.schedules import DEFAULT_GRACE, Schedule, fire_due, start_schedules

if TYPE_CHECKING:
    from flask import Request

    from loom.runtime import Runtime
    from loom.workers.http_base import Reply, Services

log = logging.getLogger("loom.schedules")
DEFAULT_INTERVAL: Final = 5.0


def describe(schedule: Schedule, now: datetime) -> dict[str, Any]:
    """A schedule as listed by ``loom schedules`` and ``GET /schedules``."""
    following = schedule.next_tick(now)
    return {
        "name": schedule.name,
        "cron": schedule.cron.expression,
        "timezone": schedule.cron.zone.key,
        "flow": schedule.flow,
        "catch_up": schedule.catch_up,
        "next_fire": following.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "next_execution_id": schedule.execution_id(following),
    }


def list_schedules(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /schedules``: the app's schedules with their next fire time."""
    now = datetime.fromtimestamp(s.runtime.clock(), UTC)
    schedules = getattr(s.runtime.app, "schedules", {})
    return 200, {"schedules": [describe(x, now) for x in schedules.values()]}


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
            runtime = get_runtime()
            if getattr(runtime.app, "schedules", None):
                for fired in await fire_due(runtime, grace=_grace()):
                    if fired.started or fired.error:
                        log.info(
                            "schedule %s tick %s: %s", fired.schedule, fired.tick, fired.status
                        )
        except (LoomError, StoreError) as exc:
            log.error("firing schedules failed: %s", exc)
        await asyncio.sleep(every)
