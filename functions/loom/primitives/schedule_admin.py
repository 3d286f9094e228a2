"""Schedules at run time: create, update, pause, unpause, trigger, backfill, delete and list.

Reached as ``runtime.schedules`` (:class:`Schedules`), ``loom schedules ...`` and the
worker's ``/schedules`` routes::

    await runtime.schedules.create("nightly", "0 2 * * *", flow="report.build",
                                   input={"kind": "nightly"}, timezone="Europe/Paris")
    await runtime.schedules.pause("nightly", note="quarter close")
    await runtime.schedules.trigger("nightly")              # one run now
    await runtime.schedules.backfill("nightly", start, end)  # every tick in [start, end)

A schedule made at run time is a record in the store's
:class:`~loom.store.schedule_store.ScheduleStore`, fired by the same passes as the schedules
declared in code (:mod:`loom.primitives.schedules`), under the same reserved tick ids
``schedule:{name}@{time}``: its first tick is the first after it was created (``start_at``
says otherwise). A schedule declared in code can be paused, unpaused, triggered and
backfilled, not updated or deleted (the code defines it). Every change is decided from the
record as loaded and written conditioned on its version; a change that lost a race is
decided again on the record that won.

A trigger starts one execution now, ``schedule:{name}#trigger-{n}@{time}`` (reserved like a
tick; ``n`` tells two triggers of one second apart), paused or not. A backfill starts every
tick of ``[start, end)`` under its tick's own id, so a tick that already ran is not run
again (at most :data:`MAX_BACKFILL` ticks a call).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from loom.errors import ConfigurationError, InputError, UnknownScheduleError
from loom.kernel.decide import MAX_DECISIONS
from loom.primitives import schedules as sch
from loom.store.schedule_store import ScheduleRecord

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

MAX_BACKFILL: Final = 1000
FIELDS: Final = ("cron", "timezone", "flow", "input", "catch_up", "start_at", "end_at")


def describe(schedule: sch.Schedule, now: datetime) -> dict[str, Any]:
    """A schedule as listed by ``loom schedules``, ``GET /schedules`` and the console."""
    following = None if schedule.paused else _next(schedule, now)
    return {
        "name": schedule.name,
        "cron": schedule.cron.expression,
        "timezone": schedule.cron.zone.key,
        "flow": schedule.flow,
        "input": schedule.input,
        "catch_up": schedule.catch_up,
        "start_at": schedule.start_at,
        "end_at": schedule.end_at,
        "since": schedule.since,
        "declared": schedule.declared,
        "paused": schedule.paused,
        "note": schedule.note,
        "next_fire": None if following is None else following.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "next_execution_id": None if following is None else schedule.execution_id(following),
    }


def _next(schedule: sch.Schedule, now: datetime) -> datetime | None:
    tick = schedule.next_tick(now)
    for _ in range(3):  # (a tick before start_at or since: the first one after)
        if schedule.begun(tick):
            break
        tick = schedule.next_tick(tick)
    return tick if schedule.eligible(tick) else None


class Schedules:
    """The schedules of one runtime, at run time (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.runtime.clock(), UTC)

    async def list(self) -> list[dict[str, Any]]:
        """Every schedule, declared and made at run time, by name."""
        found = await sch.live(self.runtime, None)
        return [describe(found[k], self._now()) for k in sorted(found)]

    async def get(self, name: str) -> dict[str, Any]:
        """One schedule.

        Raises:
            UnknownScheduleError: No schedule of that name.
        """
        return describe(await self._schedule(name), self._now())

    async def _schedule(self, name: str) -> sch.Schedule:
        found = (await sch.live(self.runtime, None)).get(name)
        if found is None:
            raise UnknownScheduleError(f"no schedule {name!r}", details={"schedule": name})
        return found

    async def create(
        self,
        name: str,
        cron: str,
        *,
        flow: str,
        input: Any = None,
        timezone: str = "UTC",
        catch_up: int = 0,
        start_at: float | datetime | None = None,
        end_at: float | datetime | None = None,
        paused: bool = False,
        note: str = "",
        by: str | None = None,
    ) -> dict[str, Any]:
        """Make a schedule; its first tick is the first after now (unless ``start_at``).

        Raises:
            InputError: The name is taken (declared in code or made before), the flow is
                unknown, the expression, zone or times are bad.
        """
        self.runtime.app.get_flow(flow)  # (UnknownFlowError, an InputError)
        now = self.runtime.clock()
        made = _checked(name, cron, timezone, flow, input, catch_up, start_at, end_at)
        if name in sch.declared(self.runtime.app):
            raise _taken(name, "declared in the app's code")
        record = ScheduleRecord(
            name,
            cron=made.cron.expression,
            timezone=made.cron.zone.key,
            flow=flow,
            input=input,
            catch_up=catch_up,
            start_at=made.start_at,
            end_at=made.end_at,
            paused=paused,
            note=note,
            since=now,
            updated_at=now,
            by=by,
        )
        if not await self.runtime.store.schedules().put(record, None):
            raise _taken(name, "made before")
        return describe(sch.from_record(record), self._now())

    async def update(self, name: str, *, by: str | None = None, **changes: Any) -> dict[str, Any]:
        """Change a schedule made at run time: any of :data:`FIELDS` and ``note``; the
        others stay. Ticks already started stay as they ran.

        Raises:
            UnknownScheduleError: No such schedule made at run time.
            InputError: A schedule declared in code, a field that is not one, a bad value.
        """
        unknown = set(changes) - {*FIELDS, "note"}
        if unknown:
            raise InputError(
                f"a schedule has no field {', '.join(sorted(unknown))}",
                details={"fields": sorted(unknown)},
            )
        if "flow" in changes:
            self.runtime.app.get_flow(str(changes["flow"]))

        def decide(record: ScheduleRecord) -> ScheduleRecord:
            if record.declared:
                raise _declared(name, "updated")
            now = self.runtime.clock()
            merged = {f: changes.get(f, getattr(record, f)) for f in FIELDS}
            made = _checked(name, **merged)
            merged.update(
                cron=made.cron.expression,
                timezone=made.cron.zone.key,
                start_at=made.start_at,
                end_at=made.end_at,
            )
            return _replace(record, now, by, **merged, note=str(changes.get("note", record.note)))

        return await self._change(name, decide)

    async def pause(self, name: str, note: str = "", by: str | None = None) -> dict[str, Any]:
        """Start no tick of ``name`` until unpaused (a trigger or a backfill still runs)."""
        now = self.runtime.clock()
        return await self._change(name, lambda r: _replace(r, now, by, paused=True, note=note))

    async def unpause(self, name: str, note: str = "", by: str | None = None) -> dict[str, Any]:
        """Fire ``name``'s ticks again, from the next one (the ticks missed while paused are
        not caught up: a backfill runs them)."""
        now = self.runtime.clock()

        def decide(r: ScheduleRecord) -> ScheduleRecord:
            # (Its first tick is the next one: the missed ones are not caught up.)
            since = now if r.paused else r.since
            start = r.start_at if r.start_at is None else max(r.start_at, now)
            return _replace(r, now, by, paused=False, note=note, since=since, start_at=start)

        return await self._change(name, decide)

    async def _change(
        self, name: str, decide: Callable[[ScheduleRecord], ScheduleRecord]
    ) -> dict[str, Any]:
        """Decide from the record loaded, write conditioned on its version, again on a race."""
        book = self.runtime.store.schedules()
        for _ in range(MAX_DECISIONS):
            record = await self._record(name)
            changed: ScheduleRecord = decide(record)
            expected = None if record.version == 0 else record.version
            if await book.put(changed, expected):
                return await self.get(name)
        raise InputError(f"schedule {name!r} kept changing; nothing was written", details={})

    async def _record(self, name: str) -> ScheduleRecord:
        """The stored record (a declared schedule not seen by a pass yet: version 0)."""
        found = await self.runtime.store.schedules().get(name)
        if found is not None and (found.cron is not None or found.declared):
            return found
        if name in sch.declared(self.runtime.app):
            return ScheduleRecord(name, declared=True, since=self.runtime.clock(), version=0)
        raise UnknownScheduleError(f"no schedule {name!r}", details={"schedule": name})

    async def delete(self, name: str) -> None:
        """Delete a schedule made at run time (its executions stay).

        Raises:
            UnknownScheduleError: No such schedule.
            InputError: It is declared in the app's code.
        """
        book = self.runtime.store.schedules()
        for _ in range(MAX_DECISIONS):
            record = await self._record(name)
            if record.declared:
                raise _declared(name, "deleted")
            if await book.delete(name, record.version):
                return
        raise InputError(f"schedule {name!r} kept changing; nothing was deleted", details={})

    async def trigger(self, name: str) -> sch.Fired:
        """Start one execution of ``name`` now, paused or not (see the module docstring)."""
        schedule = await self._schedule(name)
        now = self._now()
        eid = f"{sch.PREFIX}{name}#trigger-{uuid.uuid4().hex[:8]}@{now:%Y-%m-%dT%H:%M:%SZ}"
        return await sch.fire_as(self.runtime, schedule, now, eid)

    async def backfill(
        self, name: str, start: float | datetime, end: float | datetime
    ) -> list[sch.Fired]:
        """Start every tick of ``name`` in ``[start, end)``, each under its tick's id (one
        that ran already is not run again), oldest first.

        Raises:
            InputError: ``end`` not after ``start``, or more than :data:`MAX_BACKFILL` ticks.
        """
        schedule = await self._schedule(name)
        first, last = _utc(start, "start"), _utc(end, "end")
        if last <= first:
            raise InputError("a backfill's end must be after its start", details={})
        ticks: list[datetime] = []
        tick = schedule.cron.last_at_or_before(first)
        tick = tick if tick >= first else schedule.next_tick(tick)
        while tick < last:
            if len(ticks) == MAX_BACKFILL:
                raise InputError(
                    f"a backfill starts at most {MAX_BACKFILL} ticks; split the range",
                    details={"schedule": name},
                )
            ticks.append(tick)
            tick = schedule.next_tick(tick)
        return [await sch.fire_as(self.runtime, schedule, t) for t in ticks]


def _utc(value: float | datetime, what: str) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InputError(f"a backfill's {what} needs a time zone", details={})
        return value.astimezone(UTC)
    return datetime.fromtimestamp(float(value), UTC)


def _checked(
    name: str,
    cron: Any,
    timezone: Any,
    flow: Any,
    input: Any,
    catch_up: Any,
    start_at: Any = None,
    end_at: Any = None,
) -> sch.Schedule:
    """The schedule these values make, or an :class:`InputError` saying what is wrong."""
    try:
        return sch.build(
            name, str(cron), str(timezone), str(flow), input, catch_up, start_at, end_at
        )
    except ConfigurationError as exc:
        raise InputError(exc.message, details=exc.details) from None


def _replace(record: ScheduleRecord, now: float, by: str | None, **fields: Any) -> ScheduleRecord:
    values = {**{f: getattr(record, f) for f in record.__dataclass_fields__}, **fields}
    values.update(updated_at=now, by=by, version=record.version + 1)
    return ScheduleRecord(**values)


def _taken(name: str, how: str) -> InputError:
    return InputError(f"schedule {name!r} exists ({how})", details={"schedule": name})


def _declared(name: str, what: str) -> InputError:
    return InputError(
        f"schedule {name!r} is declared in the app's code: it is {what} there",
        details={"schedule": name},
    )
