"""The ``Inbox`` contract (``loom.store.inbox``), run unchanged over every event store's
``inbox()``: a post is written once per key, items come back oldest first and go when
removed, stranded inboxes are found shard by shard, and deleting an execution deletes its
inbox. Many posts to one execution at once all land."""

from __future__ import annotations

import asyncio

from loom.shards import shard_of
from loom.store import EventStore
from loom.store.inbox import InboxItem
from tests.contracts.test_event_store import started

T = 1_800_000_000.0


def item(key: str, at: float = T, **body: object) -> InboxItem:
    return InboxItem(key, "resume", {"on": "x", "correlation_key": key, **body}, at)


async def test_a_post_is_written_once_per_key(store: EventStore) -> None:
    inbox = store.inbox()
    assert inbox is not None
    await store.create(started("e1"))
    assert await inbox.post("e1", item("a", payload=1))
    assert not await inbox.post("e1", item("a", T + 1, payload=2))  # the first stays
    [only] = await inbox.items("e1")
    assert (only.key, only.body["payload"], only.at) == ("a", 1, T)


async def test_items_come_oldest_first_and_go_when_removed(store: EventStore) -> None:
    inbox = store.inbox()
    assert inbox is not None
    await store.create(started("e1"))
    for key, at in (("c", T + 2), ("a", T + 1), ("b", T + 1)):
        await inbox.post("e1", item(key, at))
    assert [i.key for i in await inbox.items("e1")] == ["a", "b", "c"]
    some = await inbox.items("e1", limit=2)  # two of them (any two), in order
    assert len(some) == 2 and some == sorted(some, key=lambda i: (i.at, i.key))
    await inbox.remove("e1", ["a", "c", "never-there"])
    assert [i.key for i in await inbox.items("e1")] == ["b"]
    assert await inbox.items("e2") == []  # another execution's inbox is its own


async def test_stranded_inboxes_are_found_shard_by_shard(store: EventStore) -> None:
    inbox = store.inbox()
    assert inbox is not None
    shards = await store.shard_count()
    ids = [f"e{i}" for i in range(6)]
    for i, eid in enumerate(ids):
        await store.create(started(eid))
        await inbox.post(eid, item("k", T + i))
    found: list[str] = []
    for shard in range(shards):
        here = await inbox.stranded(T + 3, shard, shards)
        assert all(shard_of(e, shards) == shard for e in here)
        found += here
    assert sorted(found) == ids[:3]  # posted before T + 3


async def test_deleting_an_execution_deletes_its_inbox(store: EventStore) -> None:
    inbox = store.inbox()
    assert inbox is not None
    await store.create(started("e1"))
    await inbox.post("e1", item("a"))
    assert await store.delete_execution("e1")
    assert await inbox.items("e1") == []
    await store.create(started("e1"))  # the id anew: nothing of the old inbox
    assert await inbox.items("e1") == []


async def test_many_posts_to_one_execution_at_once_all_land(store: EventStore) -> None:
    inbox = store.inbox()
    assert inbox is not None
    await store.create(started("e1"))
    keys = [f"child-{i:03d}" for i in range(60)]
    posted = await asyncio.gather(*(inbox.post("e1", item(k)) for k in keys))
    assert all(posted)
    assert sorted(i.key for i in await inbox.items("e1")) == keys
