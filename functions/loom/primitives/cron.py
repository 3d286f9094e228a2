"""Five-field cron expressions, evaluated in a time zone (a small parser of our own).

``minute hour day-of-month month day-of-week``, each field ``*``, a number, a range ``a-b``,
a step ``*/n`` or ``a-b/n`` or ``a/n``, or a comma-separated list of those. Months and days
of the week may be named (``jan``…``dec``, ``sun``…``sat``); day of week ``0`` and ``7`` are
both Sunday. The macros ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily``
(``@midnight``) and ``@hourly`` stand for their usual expressions. As in Vixie cron, when both
day fields are restricted a day matches if either does.

Times are wall-clock times in the expression's zone (``zoneinfo``). Across a daylight-saving
change, a wall time that does not exist that day (spring forward) does not fire, and a wall
time that happens twice (fall back) fires once, at its first occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loom.errors import ConfigurationError

_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS: Final = {
    n: i
    for i, n in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_DAYS: Final = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_NONE: Final[dict[str, int]] = {}
Field = tuple[str, int, int, dict[str, int]]
# (name, lowest, highest, names) of the five fields, in order.
_FIELDS: Final[tuple[Field, ...]] = (
    ("minute", 0, 59, _NONE),
    ("hour", 0, 23, _NONE),
    ("day of month", 1, 31, _NONE),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_SEARCH_LIMIT: Final = 200_000  # steps of a search: > 5 years of day skips, hour and minutes


def _bad(expression: str, problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"cron expression {expression!r}: {problem}", details={"cron": expression}
    )


def _number(text: str, field: Field, expression: str) -> int:
    name, low, high, names = field
    value = names.get(text.lower()) if not text.isdigit() else int(text)
    if value is None or not low <= value <= high:
        raise _bad(expression, f"{name} {text!r} is not a number from {low} to {high}")
    return value


def _field(text: str, field: Field, expression: str) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise _bad(expression, f"{field[0]} step {step_text!r} is not a positive number")
            step = int(step_text)
        if span == "*":
            low, high = field[1], field[2]
        elif "-" in span:
            first, _, last = span.partition("-")
            low, high = _number(first, field, expression), _number(last, field, expression)
            if low > high:
                raise _bad(expression, f"{field[0]} range {span!r} runs backwards")
        else:
            low = _number(span, field, expression)
            high = field[2] if step_text else low
        values.update(range(low, high + 1, step))
    return values


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression in a zone; build with :meth:`parse`."""

    expression: str
    zone: ZoneInfo
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> Cron:
        """Parse ``expression`` for wall-clock times in ``timezone`` (an IANA name).

        Raises:
            ConfigurationError: The expression or the zone is invalid (the message names
                the field), or the expression never fires.
        """
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigurationError(
                f"unknown time zone {timezone!r} (use an IANA name such as 'Europe/Paris')",
                details={"timezone": timezone},
            ) from None
        text = _MACROS.get(expression.strip().lower(), expression)
        parts = text.split()
        if len(parts) != 5:
            raise _bad(
                expression, f"needs 5 fields (minute hour day month weekday), not {len(parts)}"
            )
        values = [_field(p, f, expression) for p, f in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in values[4])
        minutes, hours, days, months = (frozenset(v) for v in values[:4])
        any_day, any_weekday = parts[2].startswith("*"), parts[4].startswith("*")
        cron = cls(expression, zone, minutes, hours, days, months, weekdays, any_day, any_weekday)
        cron.next_after(datetime(2000, 1, 1, tzinfo=UTC))  # refuses one that never fires
        return cron

    def _day_ok(self, local: datetime) -> bool:
        if local.month not in self.months:
            return False
        day = local.day in self.days
        weekday = (local.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday  # the unrestricted one matches every day
        return day or weekday

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (aware), in UTC."""
        start = moment.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        return self._search(start, 1)

    def last_at_or_before(self, moment: datetime) -> datetime:
        """The last tick at or before ``moment`` (aware), in UTC."""
        return self._search(moment.astimezone(UTC).replace(second=0, microsecond=0), -1)

    def _search(self, t: datetime, step: int) -> datetime:
        for _ in range(_SEARCH_LIMIT):
            local = t.astimezone(self.zone)
            if not self._day_ok(local):
                t = _day_edge(local, step, t)
            elif local.hour not in self.hours:
                t = t + timedelta(minutes=60 - local.minute if step > 0 else -local.minute - 1)
            elif local.minute in self.minutes and local.fold == 0:
                return t
            else:
                t = t + timedelta(minutes=step)
        raise _bad(self.expression, "never fires (no time matches it within years)")

    def ticks(self, after: datetime, until: datetime) -> list[datetime]:
        """Every tick in ``(after, until]``, oldest first."""
        found: list[datetime] = []
        tick = self.next_after(after)
        while tick <= until:
            found.append(tick)
            tick = self.next_after(tick)
        return found


def _day_edge(local: datetime, step: int, t: datetime) -> datetime:
    """The first minute of the next local day (``step`` 1) or the last of the previous one."""
    midnight = datetime(local.year, local.month, local.day, tzinfo=local.tzinfo)
    edge = midnight + timedelta(days=1) if step > 0 else midnight - timedelta(minutes=1)
    moved = edge.astimezone(UTC)
    if (moved - t).total_seconds() * step <= 0:  # a zone change at midnight: keep moving
        moved = t + timedelta(minutes=step)
    return moved
