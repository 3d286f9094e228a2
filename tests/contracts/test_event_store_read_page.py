"""``EventStore.read_page``: a page of a log, the same on every backend."""

from __future__ import annotations

from loom import events as ev
from loom.store.base import AppendRequest, EventStore


async def test_read_page_returns_at_most_limit_events_after_a_seq(store: EventStore) -> None:
    started = ev.ExecutionStarted(execution_id="pages", flow="f", at=1.0)
    await store.create(started)
    batch: list[ev.Event] = [
        ev.DecisionRecorded(step_id=str(n), kind="random", value=n) for n in range(9)
    ]
    ev.number(batch, 1, 2.0)
    await store.append(AppendRequest("pages", 1, batch))
    assert [e.seq for e in await store.read_page("pages", 0, 4)] == [1, 2, 3, 4]
    assert [e.seq for e in await store.read_page("pages", 4, 4)] == [5, 6, 7, 8]
    assert [e.seq for e in await store.read_page("pages", 8, 4)] == [9, 10]
    assert await store.read_page("pages", 10, 4) == []
    assert await store.read_page("pages", 3, 100) == await store.read("pages", 3)
