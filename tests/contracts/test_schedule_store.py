"""The ``ScheduleStore`` contract (``loom.store.schedule_store``), run unchanged over every
event store's ``schedules()``: writes conditioned on the version, one winner among racing
writers, deletes conditioned too, records read back whole."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from loom.store import EventStore
from loom.store.schedule_store import ScheduleRecord

T = 1_800_000_000.0


def rec(name: str = "s", version: int = 1, **fields: object) -> ScheduleRecord:
    base = ScheduleRecord(name, cron="*/5 * * * *", flow="f", since=T, version=version)
    return replace(base, **fields)  # type: ignore[arg-type]


async def test_a_record_is_created_once_and_read_back_whole(store: EventStore):
    book = store.schedules()
    assert await book.get("s") is None
    made = rec(input={"a": [1, "é", None]}, catch_up=2, start_at=0.0, end_at=T + 5, note="n")
    assert await book.put(made, None)
    assert await book.get("s") == made
    assert not await book.put(rec(cron="* * * * *"), None)  # exists: not written
    assert await book.get("s") == made


async def test_a_write_is_conditioned_on_the_version_it_was_decided_from(store: EventStore):
    book = store.schedules()
    assert await book.put(rec(), None)
    assert await book.put(rec(version=2, paused=True), 1)
    assert not await book.put(rec(version=2, note="stale"), 1)  # decided from version 1
    assert not await book.put(rec(version=4), 3)
    found = await book.get("s")
    assert found is not None and (found.version, found.paused, found.note) == (2, True, "")
    with pytest.raises(ValueError, match="version"):
        await book.put(rec(version=5), 2)  # a caller's mistake, not a race


async def test_a_delete_is_conditioned_too(store: EventStore):
    book = store.schedules()
    assert await book.put(rec(), None)
    assert not await book.delete("s", 2)
    assert not await book.delete("nope", 1)
    assert await book.delete("s", 1)
    assert await book.get("s") is None
    assert await book.put(rec(), None)  # the name is free again


async def test_list_answers_every_record_by_name(store: EventStore):
    book = store.schedules()
    for name in ("b", "a/b c", "c", "a"):  # any name, even one no document id could be
        assert await book.put(rec(name), None)
    assert [r.name for r in await book.list()] == ["a", "a/b c", "b", "c"]


async def test_racing_writers_of_one_version_have_one_winner(store: EventStore):
    book = store.schedules()
    assert await book.put(rec(), None)
    got = await asyncio.gather(*(book.put(rec(version=2, note=f"w{i}"), 1) for i in range(6)))
    assert sum(got) == 1
    found = await book.get("s")
    assert found is not None and found.note == f"w{got.index(True)}"
    created = await asyncio.gather(*(book.put(rec("new", note=str(i)), None) for i in range(6)))
    assert sum(created) == 1
