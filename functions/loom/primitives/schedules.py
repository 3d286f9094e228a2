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
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, cast

from loom import events as ev
from loom.errors import (
    ConfigurationError,
    LoomError,
    ReservedExecutionIdError,
    UnknownExecutionError,
)
from loom.ids import check_execution_id
from loom.kernel.starts import noting_creates
from loom.primitives.cron import Cron

if TYPE_CHECKING:
    from loom.kernel.app import App
    from loom.kernel.runtime import Runtime
    from loom.store.base import EventStore, ExecutionSummary

log = logging.getLogger("loom.schedules")

DEFAULT_GRACE: Final = 300.0
PREFIX: Final = "schedule:"


@dataclass(frozen=True, slots=True)
class Schedule:
    """One declared schedule (see the module docstring).

    Attributes:
        name: Unique in the app; part of every tick's execution id.
        cron: The parsed expression and its zone.
        flow: The flow started on each tick.
        input: The flow's input on each tick.
        catch_up: Missed ticks run after downtime (0: skip them).
    """

    name: str
    cron: Cron
    flow: str
    input: Any = None
    catch_up: int = 0

    def execution_id(self, tick: datetime) -> str:
        """The id of the execution of ``tick``: ``schedule:{name}@{UTC ISO time}``."""
        return f"{PREFIX}{self.name}@{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def due(self, now: datetime, grace: float = DEFAULT_GRACE) -> list[datetime]:
        """The ticks a pass at ``now`` starts, oldest first."""
        chosen: list[datetime] = []
        tick = self.cron.last_at_or_before(now)
        while _fresh(now, tick, grace):
            chosen.append(tick)
            tick = self._before(tick)
        for _ in range(self.catch_up):  # the most recent missed ones
            chosen.append(tick)
            tick = self._before(tick)
        return chosen[::-1]

    def _before(self, tick: datetime) -> datetime:
        return self.cron.last_at_or_before(tick - timedelta(minutes=1))

    def next_tick(self, now: datetime) -> datetime:
        """The first tick after ``now``."""
        return self.cron.next_after(now)


def _fresh(now: datetime, tick: datetime, grace: float) -> bool:
    return (now - tick).total_seconds() <= grace


def declare(
    registry: dict[str, Schedule],
    cron: str,
    *,
    flow: str,
    input: Any = None,
    name: str | None = None,
    timezone: str = "UTC",
    catch_up: int = 0,
) -> Schedule:
    """Parse and register a schedule in ``registry`` (what ``Loom.schedule`` does).

    Raises:
        ConfigurationError: A bad expression or zone, a name used twice or not usable in an
            execution id, or a negative ``catch_up``.
    """
    name = name or flow
    if name in registry:
        raise ConfigurationError(
            f"schedule {name!r} is declared twice; give each schedule of a flow its own name",
            details={"schedule": name},
        )
    if catch_up < 0 or catch_up > 1000:
        raise ConfigurationError(f"schedule {name!r}: catch_up must be 0 to 1000, not {catch_up}")
    made = Schedule(name, Cron.parse(cron, timezone), flow, input, catch_up)
    try:
        check_execution_id(made.execution_id(datetime(2000, 1, 1, tzinfo=UTC)))
    except LoomError as exc:
        raise ConfigurationError(f"schedule name {name!r} is unusable: {exc.message}") from None
    registry[name] = made
    return made


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
    for schedule in _schedules(runtime).values():
        for tick in schedule.due(moment, grace):
            fired.append(await _fire(runtime, schedule, tick))
    return fired


def _schedules(runtime: Runtime) -> dict[str, Schedule]:
    found: dict[str, Schedule] = getattr(runtime.app, "schedules", {})
    return found


async def _fire(runtime: Runtime, schedule: Schedule, tick: datetime) -> Fired:
    eid = schedule.execution_id(tick)
    iso = tick.strftime("%Y-%m-%dT%H:%M:%SZ")
    by = f"{PREFIX}{schedule.name}"
    try:
        known = await _summary(runtime, eid)
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
    mine = isinstance(first, ev.ExecutionStarted) and (
        (first.by, first.flow, first.parent, first.forked_from) == (by, schedule.flow, None, None)
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


def declared(app: App) -> dict[str, Schedule]:
    """The schedules declared on ``app`` (``Loom.schedule``), by name."""
    return cast("dict[str, Schedule]", app.declared.setdefault("schedules", {}))
