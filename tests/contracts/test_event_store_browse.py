"""The ``EventStore`` contract for an operator's listing: ``browse`` and ``count_by_status``,
on every backend (see conftest): the default walk over ``list`` and each store's own query
must give the same answers."""

from __future__ import annotations

import pytest

from loom.events import ExecutionClaimed
from loom.store import AppendRequest, EventStore, StatusChange
from loom.store.base import STATUSES, ExecutionSummary
from loom.store.browse import BrowseQuery
from tests.contracts.test_event_store import started
from tests.contracts.test_event_store_retention import finish, tick


async def seed(store: EventStore) -> list[str]:
    """Nine executions of two flows, three statuses; returned oldest first."""
    ids = ["ab", "abc", "abd", "b", "ab\u00e9", "ac", "zz", "a", "abz"]
    for i, eid in enumerate(ids):
        await store.create(started(eid, flow="pay" if i % 2 else "ship"))
        await tick()
    await finish(store, "abc")
    await finish(store, "zz", "failed")
    claim = ExecutionClaimed(seq=2, holder="h", until=1.0)
    await store.append(AppendRequest("b", 1, [claim], StatusChange("suspended", wake_at=9.0)))
    return ids


async def walk(store: EventStore, query: BrowseQuery) -> list[list[str]]:
    pages: list[list[str]] = []
    after = None
    while True:
        rows = await store.browse(BrowseQuery(**{**_fields(query), "after": after}))
        assert len(rows) <= query.limit
        if not rows:
            return pages
        pages.append([r.execution_id for r in rows])
        after = rows[-1].cursor


def _fields(query: BrowseQuery) -> dict[str, object]:
    return {name: getattr(query, name) for name in BrowseQuery.__slots__}


async def test_browse_lists_newest_first_in_pages(store: EventStore) -> None:
    ids = await seed(store)
    newest = list(reversed(ids))
    assert await walk(store, BrowseQuery(limit=4)) == [newest[0:4], newest[4:8], newest[8:]]
    rows = await store.browse(BrowseQuery(limit=2))
    assert all(isinstance(r, ExecutionSummary) for r in rows)
    assert [r.execution_id for r in rows] == newest[:2]


async def test_browse_filters_by_status_and_flow(store: EventStore) -> None:
    ids = await seed(store)
    running = [e for e in reversed(ids) if e not in ("abc", "zz", "b")]
    assert await walk(store, BrowseQuery(status="running", limit=3)) == [running[:3], running[3:]]
    pay = [e for i, e in enumerate(ids) if i % 2][::-1]
    assert await walk(store, BrowseQuery(flow="pay", limit=10)) == [pay]
    both = await store.browse(BrowseQuery(flow="pay", status="suspended"))
    assert [(r.execution_id, r.status, r.wake_at) for r in both] == [("b", "suspended", 9.0)]
    assert await store.browse(BrowseQuery(flow="nope")) == []


async def test_browse_by_id_prefix_is_exact_about_starts_with(store: EventStore) -> None:
    await seed(store)
    found = await walk(store, BrowseQuery(id_prefix="ab", limit=2))
    assert sorted(e for page in found for e in page) == ["ab", "abc", "abd", "abz", "ab\u00e9"]
    assert [len(p) for p in found] == [2, 2, 1]
    exact = await store.browse(BrowseQuery(id_prefix="abc"))
    assert [r.execution_id for r in exact] == ["abc"]
    assert await store.browse(BrowseQuery(id_prefix="abx")) == []
    assert await store.browse(BrowseQuery(id_prefix="ab/")) == []  # no id holds a slash
    assert await store.browse(BrowseQuery(id_prefix="ab.")) == []
    both = await store.browse(BrowseQuery(id_prefix="ab", status="completed", flow="pay"))
    assert [r.execution_id for r in both] == ["abc"]
    accented = await store.browse(BrowseQuery(id_prefix="ab\u00e9"))
    assert [r.execution_id for r in accented] == ["ab\u00e9"]


async def test_browse_filters_by_creation_time(store: EventStore) -> None:
    ids = await seed(store)
    rows = {r.execution_id: r for r in await store.browse(BrowseQuery(limit=100))}
    lo, hi = rows[ids[2]].created_at, rows[ids[6]].created_at
    window = await store.browse(BrowseQuery(created_from=lo, created_before=hi, limit=100))
    assert [r.execution_id for r in window] == list(reversed(ids[2:6]))
    since = await store.browse(BrowseQuery(created_from=hi, flow="ship", limit=100))
    assert [r.execution_id for r in since] == [ids[8], ids[6]]
    assert await store.browse(BrowseQuery(created_before=rows[ids[0]].created_at)) == []


async def test_count_by_status_counts_every_status(store: EventStore) -> None:
    assert await store.count_by_status() == dict.fromkeys(STATUSES, 0)
    await seed(store)
    counts = await store.count_by_status()
    want = {"running": 6, "completed": 1, "failed": 1, "suspended": 1}
    assert counts == {**dict.fromkeys(STATUSES, 0), **want}
    pay = await store.count_by_status(flow="pay")
    assert pay == {**dict.fromkeys(STATUSES, 0), "running": 2, "completed": 1, "suspended": 1}
    assert sum((await store.count_by_status(flow="nope")).values()) == 0


def test_a_page_size_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        BrowseQuery(limit=0)
    with pytest.raises(ValueError, match="limit"):
        BrowseQuery(limit=100_000)
