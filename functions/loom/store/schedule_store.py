"""The ``ScheduleStore`` SPI: schedules made at run time, and the state of those declared in
code (when first seen, paused), kept beside an event store's logs and shared by every
process that opens it.

Contract (every backend passes ``tests/contracts/test_schedule_store.py`` unchanged):

* A record is one schedule's, by ``name``, with a ``version`` that every write raises by
  one (the first write is version 1).
* ``put(record, expected)`` writes ``record`` only if the stored version is ``expected``
  (``None``: only if there is no record of that name), atomically; it returns whether it
  wrote. ``record.version`` must be ``expected + 1`` (1 for a new one). Two writers that
  decided from the same version never both write: the loser reloads and decides again.
* ``delete(name, expected)`` drops the record only if its version is ``expected``; whether
  it did.
* ``get(name)`` answers the record or ``None``; ``list()`` every record, by name.
* Every failure of the backend is a :class:`~loom.errors.StoreError` with the cause chained.
"""

from __future__ import annotations

import abc
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from loom.scope import off_scope_methods


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """One schedule as the store keeps it.

    Attributes:
        name: Unique among the app's schedules; part of every tick's execution id.
        declared: A schedule declared in code: the record holds only its state (``since``,
            ``paused``, ``note``); its definition is the code's.
        cron: The cron expression (a schedule made at run time).
        timezone: The IANA zone the expression is read in.
        flow: The flow each tick starts.
        input: The flow's input on each tick (JSON).
        catch_up: Missed ticks older than the grace window started after downtime.
        start_at: Ticks from this moment on are due (epoch seconds; default: only those
            after ``since``).
        end_at: No tick after this moment is due (epoch seconds).
        paused: No tick is started while paused (a trigger and a backfill still are).
        note: Why it was paused or changed, as the operator said.
        since: When it was created, or first seen declared: its first tick is the first
            after this moment (unless ``start_at`` says otherwise).
        updated_at: When it was last written.
        by: Who last wrote it.
        version: Raised by one on every write.
    """

    name: str
    declared: bool = False
    cron: str | None = None
    timezone: str = "UTC"
    flow: str | None = None
    input: Any = None
    catch_up: int = 0
    start_at: float | None = None
    end_at: float | None = None
    paused: bool = False
    note: str = ""
    since: float = 0.0
    updated_at: float = 0.0
    by: str | None = None
    version: int = 1

    def to_json(self) -> str:
        """The record as one JSON document."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ScheduleRecord:
        """A record from :meth:`to_json` (fields a later release added take defaults)."""
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class ScheduleStore(abc.ABC):
    """Schedule records; see the module docstring."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)

    @abc.abstractmethod
    async def get(self, name: str) -> ScheduleRecord | None:
        """The record of ``name``, if any."""

    @abc.abstractmethod
    async def list(self) -> list[ScheduleRecord]:
        """Every record, by name."""

    @abc.abstractmethod
    async def put(self, record: ScheduleRecord, expected: int | None) -> bool:
        """Write ``record`` if the stored version is ``expected`` (``None``: absent)."""

    @abc.abstractmethod
    async def delete(self, name: str, expected: int) -> bool:
        """Drop the record of ``name`` if its version is ``expected``."""


def check_version(record: ScheduleRecord, expected: int | None) -> None:
    """Refuse a write whose version is not the next one (a caller's mistake, not a race).

    Raises:
        ValueError: ``record.version`` is not ``expected + 1`` (1 for a new record).
    """
    if record.version != (expected or 0) + 1:
        raise ValueError(f"a write over version {expected} must be version {(expected or 0) + 1}")


class InMemoryScheduleStore(ScheduleStore):
    """Records in this process's memory (every method decides without an ``await``)."""

    def __init__(self) -> None:
        self._records: dict[str, ScheduleRecord] = {}

    async def get(self, name: str) -> ScheduleRecord | None:
        """See :class:`ScheduleStore`."""
        return self._records.get(name)

    async def list(self) -> list[ScheduleRecord]:
        """See :class:`ScheduleStore`."""
        return [self._records[k] for k in sorted(self._records)]

    async def put(self, record: ScheduleRecord, expected: int | None) -> bool:
        """See :class:`ScheduleStore`."""
        check_version(record, expected)
        found = self._records.get(record.name)
        if (found.version if found is not None else None) != expected:
            return False
        self._records[record.name] = record
        return True

    async def delete(self, name: str, expected: int) -> bool:
        """See :class:`ScheduleStore`."""
        found = self._records.get(name)
        if found is None or found.version != expected:
            return False
        del self._records[name]
        return True


__all__ = ["InMemoryScheduleStore", "ScheduleRecord", "ScheduleStore", "check_version"]
