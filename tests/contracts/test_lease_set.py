"""The ``LeaseSet`` contract (``loom.store.leases``), run unchanged over every event store's
``leases()``: limits, renewals, expiry, partitions, rate, depth, and no over-grant when many
holders race for the last leases; admission in batches (enqueue, admit passes, grants taken
by one call), exact too."""

from __future__ import annotations

import asyncio

from loom.store import EventStore
from loom.store.leases import LeaseRequest, QueueLimits, admit_shard, shard_limits

T = 1_800_000_000.0


def req(holder: str, now: float = T, owner: str = "", **limits: object) -> LeaseRequest:
    """A request for ``holder``'s lease, owned by ``owner`` (default: a call of ``holder``'s
    own, ``"<holder>/1"``)."""
    ttl = limits.pop("ttl", 30.0)
    return LeaseRequest("q", holder, now, ttl, owner=owner or f"{holder}/1", **limits)  # type: ignore[arg-type]


async def test_a_limit_holds_and_a_release_frees_a_lease(store: EventStore):
    leases = store.leases()
    got = [await leases.acquire(req(h, limit=2)) for h in ("a", "b", "c")]
    assert got == [True, True, False]
    assert await leases.acquire(req("a", limit=2))  # a renewal is not refused by itself
    await leases.release("q", "a", "a/1")
    await leases.release("q", "a", "a/1")  # twice: a no-op
    assert await leases.acquire(req("c", limit=2))
    other = LeaseRequest("other", "x", T, 30.0, limit=1, owner="x/1")
    assert await leases.acquire(other)  # queues are independent


async def test_an_expired_lease_no_longer_counts(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", limit=1, ttl=5.0))
    assert not await leases.acquire(req("b", T + 4.9, limit=1))
    assert await leases.acquire(req("b", T + 5.0, limit=1))


async def test_one_lease_per_partition(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", partition="alice"))
    assert not await leases.acquire(req("b", partition="alice"))
    assert await leases.acquire(req("c", partition="bob"))
    assert await leases.acquire(req("d"))  # no partition: only the limit applies
    await leases.release("q", "a", "a/1")
    assert await leases.acquire(req("b", partition="alice"))


async def test_a_rate_bounds_new_grants_per_second(store: EventStore):
    leases = store.leases()
    assert [await leases.acquire(req(h, rate=2)) for h in "abc"] == [True, True, False]
    assert await leases.acquire(req("a", T + 0.5, rate=2))  # a renewal: not a new grant
    assert await leases.acquire(req("c", T + 1.0, rate=2))


async def test_a_rate_below_one_per_second_spaces_grants_further(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", rate=0.5))
    assert not await leases.acquire(req("b", T + 1.5, rate=0.5))  # one in any 2 s
    assert await leases.acquire(req("b", T + 2.0, rate=0.5))


async def test_depth_counts_live_leases_and_waiting_holders(store: EventStore):
    leases = store.leases()
    await leases.acquire(req("a", limit=1))
    assert not await leases.acquire(req("b", limit=1))
    await leases.wait("q", "b", T)
    await leases.wait("q", "b", T)  # recorded once
    depth = await leases.depth("q", T)
    assert (depth.in_flight, depth.waiting) == (1, 1)
    await leases.release("q", "a", "a/1")
    assert await leases.acquire(req("b", limit=1))
    depth = await leases.depth("q", T)
    assert (depth.in_flight, depth.waiting) == (1, 0)
    assert (await leases.depth("q", T + 60)).in_flight == 0


async def test_racing_holders_never_exceed_the_limit(store: EventStore):
    leases = store.leases()
    got = await asyncio.gather(*(leases.acquire(req(f"h{i}", limit=5)) for i in range(20)))
    assert sum(got) == 5
    assert (await leases.depth("q", T)).in_flight == 5


async def test_a_lease_belongs_to_the_call_that_took_it(store: EventStore):
    """The same execution delivered twice: the second call neither runs beside the first
    nor frees the slot the first runs in."""
    leases = store.leases()
    assert await leases.acquire(req("a", owner="a/first", limit=1))
    assert not await leases.acquire(req("a", owner="a/second", limit=1))  # runs elsewhere
    await leases.release("q", "a", "a/second")  # not its lease: a no-op
    assert not await leases.acquire(req("b", limit=1))  # the first still holds the slot
    assert (await leases.depth("q", T)).in_flight == 1
    assert await leases.acquire(req("a", T + 1, owner="a/first", limit=1))  # its renewal
    await leases.release("q", "a", "a/first")
    assert await leases.acquire(req("b", limit=1))


async def test_a_dead_owners_lease_is_taken_over_only_by_name(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", owner="a/dead", limit=1, rate=1))
    assert not await leases.acquire(req("a", owner="a/next", limit=1, replaces="a/other"))
    assert await leases.acquire(req("a", T + 0.1, owner="a/next", limit=1, replaces="a/dead"))
    # Taken over, not a new grant: the rate saw one; and the dead owner releases nothing.
    await leases.release("q", "a", "a/dead")
    assert (await leases.depth("q", T)).in_flight == 1
    assert not await leases.acquire(req("b", T + 0.2, limit=1))
    await leases.release("q", "a", "a/next")
    assert (await leases.depth("q", T)).in_flight == 0


async def test_racing_calls_of_one_holder_take_one_lease(store: EventStore):
    leases = store.leases()
    calls = [req("a", owner=f"a/{i}", limit=3) for i in range(6)]
    got = await asyncio.gather(*(leases.acquire(r) for r in calls))
    assert sum(got) == 1
    winner = calls[got.index(True)].owner
    for r in calls:
        if r.owner != winner:
            await leases.release("q", "a", r.owner)  # the losers' releases drop nothing
    assert (await leases.depth("q", T)).in_flight == 1
    await leases.release("q", "a", winner)
    assert (await leases.depth("q", T)).in_flight == 0


# -- admission in batches: enqueue, admit, take ---------------------------------------------


def waiting(holder: str, now: float = T, **limits: object) -> LeaseRequest:
    """A request recording ``holder``'s wait (no owner yet)."""
    return req(holder, now, owner="-", **limits)


async def test_an_admit_pass_grants_the_oldest_waiters_within_the_limit(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", limit=3))
    for i, h in enumerate("edcb"):  # e waits first, b last
        await leases.enqueue(waiting(h, T + i))
    done = await leases.admit("q", 0, QueueLimits(limit=3), T + 5)
    assert [w.holder for w in done.granted] == ["e", "d"] and done.waiting == 2
    depth = await leases.depth("q", T + 5)
    assert (depth.in_flight, depth.waiting) == (3, 2)
    again = await leases.admit("q", 0, QueueLimits(limit=3), T + 5)
    assert again.granted == [] and again.waiting == 2  # full: nothing more


async def test_a_grant_is_taken_by_one_call_and_is_then_its_lease(store: EventStore):
    leases = store.leases()
    await leases.enqueue(waiting("b"))
    [granted] = (await leases.admit("q", 0, QueueLimits(limit=1), T)).granted
    assert granted.holder == "b"
    assert not await leases.acquire(req("x", T + 1, limit=1))  # the grant holds the slot
    assert await leases.take(req("b", T + 1, owner="b/first"))
    assert not await leases.take(req("b", T + 1, owner="b/second"))  # runs elsewhere
    assert not await leases.acquire(req("b", T + 1, owner="b/second", limit=1))
    await leases.release("q", "b", "b/second")  # not its lease: a no-op
    assert (await leases.depth("q", T + 1)).in_flight == 1
    assert await leases.take(req("b", T + 2, owner="b/first"))  # its renewal
    await leases.release("q", "b", "b/first")
    assert await leases.acquire(req("x", T + 3, limit=1))


async def test_take_never_makes_a_new_grant(store: EventStore):
    leases = store.leases()
    assert not await leases.take(req("a", limit=5))  # room, but no grant and no lease
    assert (await leases.depth("q", T)).in_flight == 0
    assert await leases.acquire(req("a", owner="a/dead", limit=5))
    assert await leases.take(req("a", T + 1, owner="a/next", replaces="a/dead"))  # taken over
    assert not await leases.take(req("a", T + 1, owner="a/other", replaces="a/dead"))


async def test_an_unclaimed_grant_lapses_and_frees_its_slot(store: EventStore):
    leases = store.leases()
    for i, h in enumerate("bc"):
        await leases.enqueue(waiting(h, T + i))
    limits = QueueLimits(limit=1, grant_ttl=5.0)
    assert [w.holder for w in (await leases.admit("q", 0, limits, T)).granted] == ["b"]
    assert (await leases.admit("q", 0, limits, T + 4.9)).granted == []
    assert [w.holder for w in (await leases.admit("q", 0, limits, T + 5.0)).granted] == ["c"]
    assert not await leases.take(req("b", T + 5.0))  # lapsed


async def test_an_admit_pass_skips_a_partition_in_use_and_keeps_the_order(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", partition="alice"))
    await leases.enqueue(waiting("b", T + 1, partition="alice"))
    await leases.enqueue(waiting("c", T + 2, partition="bob"))
    await leases.enqueue(waiting("d", T + 3, partition="alice"))
    await leases.enqueue(waiting("e", T + 4, partition="bob"))
    assert [w.holder for w in (await leases.admit("q", 0, QueueLimits(), T + 5)).granted] == ["c"]
    await leases.release("q", "a", "a/1")
    done = await leases.admit("q", 0, QueueLimits(), T + 6)
    assert [w.holder for w in done.granted] == ["b"] and done.waiting == 2


async def test_an_admit_pass_keeps_to_the_rate_and_says_when_to_come_back(store: EventStore):
    leases = store.leases()
    for i in range(5):
        await leases.enqueue(waiting(f"h{i}", T + i / 10))
    limits = QueueLimits(rate=2)
    first = await leases.admit("q", 0, limits, T + 1)
    assert [w.holder for w in first.granted] == ["h0", "h1"] and first.again_at == T + 2
    assert (await leases.admit("q", 0, limits, T + 1.5)).granted == []
    assert [w.holder for w in (await leases.admit("q", 0, limits, T + 2)).granted] == ["h2", "h3"]


async def test_a_holder_already_waiting_keeps_its_place(store: EventStore):
    leases = store.leases()
    await leases.enqueue(waiting("b", T))
    await leases.enqueue(waiting("c", T + 1))
    await leases.enqueue(waiting("b", T + 2))  # asked again: still first
    assert (await leases.depth("q", T + 2)).waiting == 2
    done = await leases.admit("q", 0, QueueLimits(limit=1), T + 3)
    assert [w.holder for w in done.granted] == ["b"]


async def test_racing_admit_passes_and_acquires_never_exceed_the_limit(store: EventStore):
    leases = store.leases()
    for i in range(10):
        await leases.enqueue(waiting(f"w{i}", T + i / 100))
    limits = QueueLimits(limit=5)
    passes = [leases.admit("q", 0, limits, T + 1) for _ in range(3)]
    direct = [leases.acquire(req(f"d{i}", T + 1, limit=5)) for i in range(5)]
    got = await asyncio.gather(*passes, *direct)
    granted = sum(len(g.granted) for g in got[:3])  # type: ignore[union-attr]
    acquired = sum(1 for ok in got[3:] if ok is True)
    assert granted + acquired == 5
    assert (await leases.depth("q", T + 1)).in_flight == 5


async def test_admit_shards_split_the_limits_and_keep_partitions_exact(store: EventStore):
    leases = store.leases()
    limits = QueueLimits(limit=4, shards=2)
    keys = ["k0", "k1", "k2", None]
    for i in range(12):
        await leases.enqueue(waiting(f"w{i:02d}", T + i, limit=4, partition=keys[i % 4], shards=2))
    shards = sorted({admit_shard(waiting(f"w{i:02d}", limit=4, partition=keys[i % 4], shards=2))
                     for i in range(12)})  # fmt: skip
    granted: list[str | None] = []
    for shard in (0, 1):
        done = await leases.admit("q", shard, limits, T + 20)
        assert len(done.granted) <= shard_limits(limits, shard).limit  # type: ignore[operator]
        granted += [w.partition for w in done.granted]
    assert 1 <= len(granted) <= 4 and len(granted) >= len(shards)
    named = [p for p in granted if p is not None]
    assert len(named) == len(set(named))  # one lease per partition key
    assert (await leases.depth("q", T + 20)).in_flight == len(granted)
