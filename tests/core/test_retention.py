"""``loom.ops.retention``: ages, budgets, and blobs deleted only where they are the purged one's."""

from __future__ import annotations

import pytest

from loom.blobs import InMemoryBlobStore
from loom.errors import BlobNotFoundError, InputError
from loom.events import ExecutionCompleted, ExecutionStarted
from loom.ops.retention import parse_age, purge_finished
from loom.store import AppendRequest, InMemoryEventStore, StatusChange


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 14 * 86400)],
)
def test_ages(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "-1d", "30 days", "d", "1y"])
def test_bad_ages_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="retention age"):
        parse_age(text)


async def finished(store: InMemoryEventStore, eid: str) -> None:
    await store.create(ExecutionStarted(execution_id=eid, flow="f", input=None))
    done = ExecutionCompleted(seq=2, output=None)
    await store.append(AppendRequest(eid, 1, [done], StatusChange("completed")))


async def test_an_id_with_a_slash_never_deletes_blobs_by_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its prefix could cover another execution's blobs ("a/b/" is inside "a/").

    The id rule refuses such ids now; this is a log written before it (the store's check is
    switched off to write one).
    """
    monkeypatch.setattr("loom.store.memory.check_execution_id", lambda eid: eid)
    store, blobs = InMemoryEventStore(), InMemoryBlobStore()
    await store.create(ExecutionStarted(execution_id="a", flow="f", input=None))  # running
    await finished(store, "a/b")
    await finished(store, "c")
    running = await blobs.put("a/b-note/h", b"a")
    nested = await blobs.put("a/b/input/h", b"ab")
    purged = await blobs.put("c/input/h", b"c")
    summary = await purge_finished(store, blobs, older_than=0.0, clock=lambda: 1e12)
    assert (summary.purged, summary.blobs) == (2, 1)
    with pytest.raises(BlobNotFoundError):
        await blobs.get(purged)
    assert [await blobs.get(running), await blobs.get(nested)] == [b"a", b"ab"]
    assert [r.execution_id for r in await store.list()] == ["a"]


async def test_the_budget_stops_between_batches_and_the_next_run_continues() -> None:
    store = InMemoryEventStore()
    for i in range(5):
        await finished(store, f"e{i}")
    ticks = iter(range(100))
    first = await purge_finished(
        store,
        None,
        older_than=0.0,
        batch=2,
        budget=1.0,
        clock=lambda: 1e12,
        timer=lambda: float(next(ticks)),
    )
    assert (first.purged, first.batches, first.complete) == (2, 1, False)
    second = await purge_finished(store, None, older_than=0.0, batch=2, clock=lambda: 1e12)
    assert (second.purged, second.complete) == (3, True)
    assert await store.list() == []
