"""The ``LeaseSet`` contract (``loom.store.leases``), run unchanged over every event store's
``leases()``: limits, renewals, expiry, partitions, rate, depth, and no over-grant when many
holders race for the last leases."""

from __future__ import annotations

import asyncio

from loom.store import EventStore
from loom.store.leases import LeaseRequest

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
