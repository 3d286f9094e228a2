"""The cron parser: fields, names, steps, both day fields, macros, zones across DST, and
clear errors naming the bad field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from loom.errors import ConfigurationError
from loom.primitives.cron import Cron


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * *", at(2026, 11, 30, 6, 37, 12), at(2026, 11, 30, 6, 40)),
        ("*/5 * * * *", at(2026, 11, 30, 6, 40), at(2026, 11, 30, 6, 45)),  # strictly after
        ("0 9 * * mon-fri", at(2026, 11, 28, 12), at(2026, 11, 30, 9)),  # Sat -> Mon
        ("15,45 8-10/2 * * *", at(2026, 1, 1, 8, 46), at(2026, 1, 1, 10, 15)),
        ("0 0 1 jan,jul *", at(2026, 2, 1), at(2026, 7, 1)),
        ("0 0 13 * fri", at(2026, 11, 28), at(2026, 12, 4)),  # either day field matches
        ("0 0 * * 7", at(2026, 11, 28), at(2026, 11, 29)),  # 7 is Sunday too
        ("0 0 29 2 *", at(2026, 3, 1), at(2028, 2, 29)),
        ("@hourly", at(2026, 1, 1, 0, 0, 30), at(2026, 1, 1, 1)),
        ("@weekly", at(2026, 11, 30), at(2026, 12, 6)),
        ("30 23 31 12 *", at(2026, 1, 1), at(2026, 12, 31, 23, 30)),
    ],
)
def test_next_after(expression: str, after: datetime, expected: datetime) -> None:
    assert Cron.parse(expression).next_after(after) == expected


def test_last_at_or_before_includes_the_moment() -> None:
    cron = Cron.parse("*/5 * * * *")
    assert cron.last_at_or_before(at(2026, 1, 1, 0, 5, 59)) == at(2026, 1, 1, 0, 5)
    assert cron.last_at_or_before(at(2026, 1, 1, 0, 4, 59)) == at(2026, 1, 1, 0, 0)
    assert Cron.parse("0 0 1 * *").last_at_or_before(at(2026, 3, 15)) == at(2026, 3, 1)


def test_zones_and_daylight_saving() -> None:
    paris = Cron.parse("30 2 * * *", "Europe/Paris")
    # 29 March 2026: 02:30 does not exist in Paris; the next one is 30 March, 02:30 CEST.
    assert paris.next_after(at(2026, 3, 28, 12)) == at(2026, 3, 30, 0, 30)
    # 25 October 2026: 02:30 happens twice; it fires once, at the first (CEST).
    ticks = paris.ticks(at(2026, 10, 24, 12), at(2026, 10, 26, 12))
    assert ticks == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    assert Cron.parse("0 9 * * *", "Asia/Kolkata").next_after(at(2026, 1, 1)) == at(
        2026, 1, 1, 3, 30
    )


@pytest.mark.parametrize(
    ("expression", "timezone", "message"),
    [
        ("* * * *", "UTC", "needs 5 fields"),
        ("60 * * * *", "UTC", "minute '60' is not a number from 0 to 59"),
        ("* 24 * * *", "UTC", "hour '24'"),
        ("*/0 * * * *", "UTC", "step '0'"),
        ("5-1 * * * *", "UTC", "runs backwards"),
        ("* * * foo *", "UTC", "month 'foo'"),
        ("* * * * funday", "UTC", "day of week 'funday'"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("* * * * *", "Mars/Olympus", "unknown time zone"),
    ],
)
def test_bad_expressions_name_what_is_wrong(expression: str, timezone: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Cron.parse(expression, timezone)
