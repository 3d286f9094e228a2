"""Schedules: a flow started on every tick of a cron expression, exactly once per tick.

Declared on the app::

    app.schedule("*/5 * * * *", flow="report.build", input={"kind": "hourly"},
                 timezone="Europe/Paris", name="report", catch_up=0)

Firing is a pass, :func:`fire_due`, that anything may run at any time and as often as it
likes: ``loom serve`` runs one every few seconds, and in production a single Cloud Scheduler
job calls ``POST /tasks/schedules`` on the tasks service every minute. A pass works out from
its own clock which ticks are due, and starts each as the execution
``schedule:{name}@{tick, UTC, ISO-8601}``. Starts are idempotent by execution id, so a tick
delivered twice, late, by two passes at once or by two processes starts one execution, and
exactly one pass reports it ``started``: the one whose start created it (the store's create
decides, atomically); every other pass reports it with ``started`` false and the status it
found, however close the race.

Which ticks a pass starts (the missed-tick policy):

* a tick not older than ``grace`` seconds (default 5 minutes): a pass running late still
  starts it, under its own tick's id;
* ``catch_up=0`` (the default, *skip*): a tick missed for longer than ``grace`` (the service
  was down) is skipped;
* ``catch_up=N``: besides those, the N most recent ticks older than ``grace`` are started if
  they have no execution yet, oldest first, so after downtime up to N missed ticks run. (An
  execution of such a tick that the retention purge already deleted would start again: keep
  ``N`` periods well under the retention period.)

The input is the declared value; a flow that wants the tick's time reads it from its
execution id or ``ctx.now()``.

Where the dispatcher carries jobs (Cloud Tasks), the minutely tick only fans out
(:func:`start_schedules`): the schedules are split over shards (by name), and each shard's
pass of each minute is a job of its own, keyed by shard and minute (so the minutes of the
grace window are asked for again by every tick, and each runs once), due at a moment of
the minute of its own (the shards' starts are spread over the minute, not all at ``:00``).
A shard's pass (:func:`run_schedules_job`) starts the ticks of its minute straight away:
the start is create-if-absent, so no tick costs a read, and a tick a repeated pass meets
again is one refused create.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import LoomError, ReservedExecutionIdError, UnknownExecutionError
from loom.kernel import jobs
from loom.kernel.primitive import Primitive
from loom.kernel.starts import noting_creates
from loom.primitives.schedule_spec import (
    DEFAULT_GRACE,
    PREFIX,
    Schedule,
    build,
    declare,
    declared,
    from_record,
    live,
)
from loom.shards import shard_of

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.store.base import EventStore, ExecutionSummary

log = logging.getLogger("loom.schedules")

__all__ = [
    "DEFAULT_GRACE",
    "PREFIX",
    "PRIMITIVE",
    "Fired",
    "Schedule",
    "build",
    "declare",
    "declared",
    "fire_as",
    "fire_due",
    "from_record",
    "live",
    "run_schedules_job",
    "start_schedules",
]


@dataclass(frozen=True, slots=True)
class Fired:
    """What a pass did for one tick.

    Attributes:
        schedule: The schedule's name.
        tick: The tick, UTC ISO-8601.
        execution_id: The tick's execution.
        started: Whether this pass created it (False: an earlier or racing pass did).
        status: Where the execution stands, or ``error``.
        error: Why it could not be started, if it could not.
    """

    schedule: str
    tick: str
    execution_id: str
    started: bool
    status: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "schedule": self.schedule,
            "tick": self.tick,
            "execution_id": self.execution_id,
            "started": self.started,
            "status": self.status,
            "error": self.error,
        }


async def fire_due(
    runtime: Runtime, now: float | None = None, *, grace: float = DEFAULT_GRACE
) -> list[Fired]:
    """Start every due tick of every schedule of ``runtime.app`` (idempotent; see above).

    A schedule whose start fails (an unknown flow, a store error) is reported in its
    :class:`Fired` and logged; the other schedules still fire.
    """
    moment = datetime.fromtimestamp(runtime.clock() if now is None else now, UTC)
    fired: list[Fired] = []
    for schedule in (await live(runtime, moment.timestamp())).values():
        for tick in schedule.due(moment, grace):
            fired.append(await _fire(runtime, schedule, tick))
    return fired


async def fire_as(
    runtime: Runtime, schedule: Schedule, tick: datetime, execution_id: str | None = None
) -> Fired:
    """Start ``schedule``'s execution of ``tick`` (under ``execution_id``, a reserved form
    of its own, if given: a trigger's), unless it exists; what happened."""
    return await _fire(runtime, schedule, tick, eid=execution_id)


async def _fire(
    runtime: Runtime,
    schedule: Schedule,
    tick: datetime,
    *,
    read_first: bool = True,
    eid: str | None = None,
) -> Fired:
    eid = eid or schedule.execution_id(tick)
    iso = tick.strftime("%Y-%m-%dT%H:%M:%SZ")
    by = f"{PREFIX}{schedule.name}"
    try:
        known = await _summary(runtime, eid) if read_first else None
        if known is not None:  # the common repeat: no flow lookup, no write
            await _check_own(runtime, schedule, eid, by)
            return Fired(schedule.name, iso, eid, False, known.status)
        with noting_creates() as created:  # a racing pass may create it first
            result = await runtime.start(
                schedule.flow, schedule.input, execution_id=eid, by=by, derived="schedule"
            )
    except LoomError as exc:
        log.error("schedule %s tick %s: %s", schedule.name, iso, exc.message)
        return Fired(schedule.name, iso, eid, False, "error", f"{exc.code}: {exc.message}")
    return Fired(schedule.name, iso, eid, eid in created, result.status)


async def _summary(runtime: Runtime, eid: str) -> ExecutionSummary | None:
    try:
        return await runtime.store.summary(eid)
    except UnknownExecutionError:
        return None


# Tick executions found to be the schedule's own, by store (ids are never reused by another
# start: outside starts of the form are refused), so a pass reads each one's start once.
_OWN: weakref.WeakKeyDictionary[EventStore, set[str]] = weakref.WeakKeyDictionary()
_OWN_MAX = 4096


async def _check_own(runtime: Runtime, schedule: Schedule, eid: str, by: str) -> None:
    """Refuse to report an execution under a tick's id that the schedule did not start
    (one created under its id before such ids were reserved, or written to the store by
    hand): it is not this tick's run, whatever its status.

    Raises:
        ReservedExecutionIdError: It is not the schedule's own.
    """
    own = _OWN.setdefault(runtime.store, set())
    if eid in own:
        return
    first = (await runtime.store.read(eid))[0]
    # (A schedule made at run time may have changed its flow since the tick started.)
    flow = schedule.flow if schedule.declared else getattr(first, "flow", None)
    mine = isinstance(first, ev.ExecutionStarted) and (
        (first.by, first.flow, first.parent, first.forked_from) == (by, flow, None, None)
    )
    if not mine:
        raise ReservedExecutionIdError(
            f"the execution under tick id {eid!r} was not started by schedule "
            f"{schedule.name!r}; the tick is not run",
            details={"execution_id": eid, "schedule": schedule.name},
        )
    if len(own) >= _OWN_MAX:
        own.clear()
    own.add(eid)


SHARDS: Final = 16  # at most this many schedule shards
SPREAD: Final = 50.0  # seconds of each minute over which the shards' passes start


def schedule_shards(count: int) -> int:
    """How many shards ``count`` schedules are split over."""
    return max(1, min(SHARDS, count))


async def start_schedules(runtime: Runtime, *, grace: float = DEFAULT_GRACE) -> dict[str, Any]:
    """The minutely tick where jobs travel: a pass job per schedule shard and minute of the
    grace window (see the module docstring); what it asked for."""
    schedules = await live(runtime, runtime.clock(), record=False)  # (the shards record them)
    if not schedules:
        return {"shards": 0, "minutes": 0}
    shards = schedule_shards(len(schedules))
    now = runtime.clock()
    last = int(now // 60) * 60
    minutes = [last - 60 * i for i in range(int(grace // 60) + 1)]
    for minute in minutes:
        for shard in range(shards):
            at = minute + SPREAD * shard / shards  # spread over the minute
            args = {"shard": shard, "shards": shards, "minute": minute, "grace": grace}
            job = jobs.Job("schedules", f"{shard}/{shards}@{minute}", args, shard=shard)
            await jobs.enqueue(runtime, job, not_before=at if at > now else None)
    return {"shards": shards, "minutes": len(minutes)}


async def run_schedules_job(runtime: Runtime, job: jobs.Job) -> dict[str, Any]:
    """One shard's pass of one minute: start each of its schedules' tick of that minute,
    create-if-absent (and, for a schedule with ``catch_up``, the missed ticks before it)."""
    shard, shards = int(job.args["shard"]), int(job.args["shards"])
    minute = datetime.fromtimestamp(float(job.args["minute"]), UTC)
    fired: list[Fired] = []
    # (Each shard records when its own declared schedules were first seen: no two passes
    # write one schedule's record.)
    own = await live(runtime, runtime.clock(), mine=lambda n: shard_of(n, shards) == shard)
    for schedule in own.values():
        if shard_of(schedule.name, shards) != shard or schedule.paused:
            continue
        tick = schedule.cron.last_at_or_before(minute)
        if (minute - tick).total_seconds() < 60 and schedule.eligible(tick):
            fired.append(await _fire(runtime, schedule, tick, read_first=False))
        grace = float(job.args.get("grace") or DEFAULT_GRACE)
        for older in _missed(schedule, tick, minute, grace):
            fired.append(await _fire(runtime, schedule, older))
    started = sum(1 for f in fired if f.started)
    return {"shard": shard, "minute": minute.isoformat(), "fired": len(fired), "started": started}


def _missed(schedule: Schedule, tick: datetime, minute: datetime, grace: float) -> list[datetime]:
    """The ``catch_up`` ticks before the grace window of a pass at ``minute`` (read first:
    they most likely ran), oldest first."""
    older: list[datetime] = []
    while schedule.catch_up and (minute - tick).total_seconds() <= grace:
        tick = schedule.previous(tick)
    for _ in range(schedule.catch_up):
        if not schedule.begun(tick):
            break
        older.append(tick)
        tick = schedule.previous(tick)
    return [t for t in older[::-1] if schedule.eligible(t)]


PRIMITIVE = Primitive("schedules", jobs={"schedules": run_schedules_job})
"""The schedules' passes, as jobs (their declarations live on the app: ``Loom.schedule``)."""
