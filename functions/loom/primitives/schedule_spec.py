"""What a schedule is: a cron expression in a zone, a flow and its input, and which ticks
are due (see :mod:`loom.primitives.schedules` for how passes fire them), and the schedules
of an app as a pass sees them: those declared in code with their state from the store, and
those made at run time (:mod:`loom.primitives.schedule_admin`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, cast

from loom.errors import ConfigurationError, LoomError
from loom.ids import check_execution_id
from loom.primitives.cron import Cron
from loom.store.schedule_store import ScheduleRecord, ScheduleStore

if TYPE_CHECKING:
    from loom.kernel.app import App
    from loom.kernel.runtime import Runtime

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
        start_at: Ticks from this moment (epoch seconds) are due; default: only the ticks
            after ``since``. ``0`` starts every due tick, even from before it existed.
        end_at: No tick after this moment is due.
        since: When it was declared (first seen by a pass) or created at run time: its
            first tick is the first after it. ``None``: not known (every due tick).
        paused: No tick is due while paused.
        declared: Declared in code (else made at run time, :mod:`.schedule_admin`).
        note: The operator's note of its last change.
    """

    name: str
    cron: Cron
    flow: str
    input: Any = None
    catch_up: int = 0
    start_at: float | None = None
    end_at: float | None = None
    since: float | None = None
    paused: bool = False
    declared: bool = True
    note: str = ""

    def execution_id(self, tick: datetime) -> str:
        """The id of the execution of ``tick``: ``schedule:{name}@{UTC ISO time}``."""
        return f"{PREFIX}{self.name}@{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def due(self, now: datetime, grace: float = DEFAULT_GRACE) -> list[datetime]:
        """The ticks a pass at ``now`` starts, oldest first (none while paused)."""
        if self.paused:
            return []
        chosen: list[datetime] = []
        tick = self.cron.last_at_or_before(now)
        while _fresh(now, tick, grace):
            chosen.append(tick)
            tick = self.previous(tick)
        for _ in range(self.catch_up):  # the most recent missed ones
            if not self.begun(tick):
                break
            chosen.append(tick)
            tick = self.previous(tick)
        return [t for t in chosen[::-1] if self.eligible(t)]

    def begun(self, tick: datetime) -> bool:
        """Whether ``tick`` is not before the schedule's first: after it was declared (or
        from ``start_at``)."""
        at = tick.timestamp()
        if self.start_at is not None:
            return at >= self.start_at
        return self.since is None or at > self.since

    def eligible(self, tick: datetime) -> bool:
        """Whether ``tick`` is one of this schedule's: begun, and not after ``end_at``."""
        return self.begun(tick) and (self.end_at is None or tick.timestamp() <= self.end_at)

    def previous(self, tick: datetime) -> datetime:
        """The tick before ``tick``."""
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
    start_at: float | datetime | None = None,
    end_at: float | datetime | None = None,
) -> Schedule:
    """Parse and register a schedule in ``registry`` (what ``Loom.schedule`` does).

    Raises:
        ConfigurationError: A bad expression or zone, a name used twice or not usable in an
            execution id, a negative ``catch_up``, or a bad ``start_at``/``end_at``.
    """
    name = name or flow
    if name in registry:
        raise ConfigurationError(
            f"schedule {name!r} is declared twice; give each schedule of a flow its own name",
            details={"schedule": name},
        )
    registry[name] = made = build(name, cron, timezone, flow, input, catch_up, start_at, end_at)
    return made


def build(
    name: str,
    cron: str,
    timezone: str,
    flow: str,
    input: Any,
    catch_up: int,
    start_at: float | datetime | None = None,
    end_at: float | datetime | None = None,
    **state: Any,
) -> Schedule:
    """A checked :class:`Schedule` (``state``: its ``since``, ``paused``, ``declared``…).

    Raises:
        ConfigurationError: See :func:`declare`.
    """
    if (
        isinstance(catch_up, bool)
        or not isinstance(cast(object, catch_up), int)
        or not 0 <= catch_up <= 1000
    ):
        raise ConfigurationError(f"schedule {name!r}: catch_up must be 0 to 1000, not {catch_up}")
    start, end = _moment(name, "start_at", start_at), _moment(name, "end_at", end_at)
    if start is not None and end is not None and end < start:
        raise ConfigurationError(f"schedule {name!r}: end_at is before start_at")
    made = Schedule(name, Cron.parse(cron, timezone), flow, input, catch_up, start, end, **state)
    try:
        check_execution_id(made.execution_id(datetime(2000, 1, 1, tzinfo=UTC)))
    except LoomError as exc:
        raise ConfigurationError(f"schedule name {name!r} is unusable: {exc.message}") from None
    return made


def _moment(name: str, what: str, value: float | datetime | None) -> float | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError(f"schedule {name!r}: {what} needs a time zone")
        return value.timestamp()
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(cast(object, value), int | float):
        raise ConfigurationError(f"schedule {name!r}: {what} must be a time, not {value!r}")
    return float(value)


def declared(app: App) -> dict[str, Schedule]:
    """The schedules declared on ``app`` (``Loom.schedule``), by name."""
    return cast("dict[str, Schedule]", app.declared.setdefault("schedules", {}))


async def live(
    runtime: Runtime,
    seen_at: float | None,
    *,
    record: bool = True,
    mine: Callable[[str], bool] | None = None,
) -> dict[str, Schedule]:
    """Every schedule as a pass sees it: those declared on the app, with their state from
    the store (when first seen — recorded now, at ``seen_at``, for one seen for the first
    time; ``None``: a reader, which records nothing — and whether paused), and those made
    at run time (:mod:`.schedule_admin`). A store that keeps no schedules gives the
    declared ones alone, with no state. With ``record`` false, or for a name ``mine`` says is
    another pass's to record (a shard's pass records its own schedules only), one never seen
    counts as seen at ``seen_at``, unwritten."""
    code = declared(runtime.app)
    try:
        book = runtime.store.schedules()
    except ConfigurationError:
        return dict(code)
    records = {r.name: r for r in await book.list()}
    found: dict[str, Schedule] = {}
    for name, schedule in code.items():
        known = records.get(name)
        if known is None and seen_at is None:
            found[name] = schedule
            continue
        if known is None and not (record and (mine is None or mine(name))):
            found[name] = replace(schedule, since=seen_at)
            continue
        known = known or await _first_seen(book, name, seen_at or 0.0)
        found[name] = replace(schedule, since=known.since, paused=known.paused, note=known.note)
    for name, made in records.items():
        if made.declared or name in code or made.cron is None or made.flow is None:
            continue  # (a declared schedule since removed from the code, or one it shadows)
        try:
            found[name] = from_record(made)
        except ConfigurationError as exc:  # (a zone this Python lacks, say): the others fire
            log.error("schedule %s is unusable here: %s", name, exc.message)
    return found


def from_record(record: ScheduleRecord) -> Schedule:
    """The schedule a run-time record defines.

    Raises:
        ConfigurationError: Its cron expression or zone is unusable here.
    """
    assert record.cron is not None and record.flow is not None
    return build(
        record.name,
        record.cron,
        record.timezone,
        record.flow,
        record.input,
        record.catch_up,
        record.start_at,
        record.end_at,
        since=record.since,
        paused=record.paused,
        declared=False,
        note=record.note,
    )


async def _first_seen(book: ScheduleStore, name: str, at: float) -> ScheduleRecord:
    """Record when a declared schedule was first seen (a racing pass may record it first:
    then its moment stands)."""
    record = ScheduleRecord(name, declared=True, since=at, updated_at=at)
    if await book.put(record, None):
        return record
    return await book.get(name) or record
