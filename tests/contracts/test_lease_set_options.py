"""The ``LeaseSet`` contract's priority and deduplication ids (``loom.store.leases``), run
unchanged over every event store's ``leases()``: an admit pass grants by priority, then
oldest first; ``acquire`` never lets a newcomer overtake a waiter of a better priority that
could run; a deduplication id is held by one holder at a time, taken over only from the
holder named, and dropped only by its holder."""

from __future__ import annotations

import asyncio

from loom.store import EventStore
from loom.store.leases import QueueLimits
from tests.contracts.test_lease_set import T, req, waiting


async def test_an_admit_pass_grants_by_priority_then_oldest_first(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("busy", limit=1))
    for i, (h, p) in enumerate([("late", 5), ("old", 5), ("urgent", 1), ("plain", 0)]):
        await leases.enqueue(waiting(h, T + (10 - i if h == "old" else i), priority=p))
    await leases.release("q", "busy", "busy/1")
    order: list[str] = []
    for k in range(4):
        done = await leases.admit("q", 0, QueueLimits(limit=1), T + 20 + k)
        [granted] = done.granted
        order.append(granted.holder)
        assert await leases.take(req(granted.holder, T + 20 + k, limit=1))
        await leases.release("q", granted.holder, f"{granted.holder}/1")
    # 0 before 1 before 5; among the two of 5, "late" enqueued first (T+0 < T+10)
    assert order == ["plain", "urgent", "late", "old"]


async def test_acquire_lets_no_newcomer_overtake_a_better_waiter(store: EventStore):
    leases = store.leases()
    assert await leases.acquire(req("a", limit=1))
    await leases.enqueue(waiting("vip", T + 1, limit=1, priority=1))
    await leases.release("q", "a", "a/1")
    # A slot is free, but "vip" waits for it: a newcomer of priority 5, or of the same
    # priority come later, is refused; the waiter itself gets it.
    assert not await leases.acquire(req("low", T + 2, limit=1, priority=5))
    assert not await leases.acquire(req("same", T + 2, limit=1, priority=1))
    assert await leases.acquire(req("vip", T + 2, limit=1, priority=1))
    assert (await leases.depth("q", T + 2)).waiting == 0


async def test_a_better_newcomer_and_a_blocked_waiter_do_not_wait(store: EventStore):
    leases = store.leases()
    await leases.enqueue(waiting("slow", T, priority=5))
    assert await leases.acquire(req("first", T + 1, priority=0))  # better than the waiter
    assert await leases.acquire(req("k1", T + 1, partition="k"))
    await leases.enqueue(waiting("k2", T + 1, partition="k"))  # its key is busy: it cannot run
    await leases.admit("q", 0, QueueLimits(), T + 2)  # grants "slow" (it is free to run)
    assert await leases.acquire(req("other", T + 3, priority=9))  # nobody runnable waits


async def test_a_deduplication_id_has_one_holder(store: EventStore):
    leases = store.leases()
    first = await leases.deduplicate("q", "d-1", "a", T)
    assert (first.holder, first.since) == ("a", T)
    again = await leases.deduplicate("q", "d-1", "a", T + 5)  # its holder again: kept, since T
    assert (again.holder, again.since) == ("a", T)
    other = await leases.deduplicate("q", "d-1", "b", T + 6)
    assert (other.holder, other.since) == ("a", T)  # refused: "a" holds it
    assert (await leases.deduplicate("q", "d-1", "b", T + 6, replaces="c")).holder == "a"
    taken = await leases.deduplicate("q", "d-1", "b", T + 7, replaces="a")
    assert (taken.holder, taken.since) == ("b", T + 7)
    assert (await leases.deduplicate("other", "d-1", "x", T)).holder == "x"  # per queue


async def test_only_its_holder_drops_a_deduplication_id(store: EventStore):
    leases = store.leases()
    await leases.deduplicate("q", "d", "a", T)
    await leases.forget("q", "d", "b")  # not b's: a no-op
    assert (await leases.deduplicate("q", "d", "b", T + 1)).holder == "a"
    await leases.forget("q", "d", "a")
    await leases.forget("q", "d", "a")  # twice: a no-op
    assert (await leases.deduplicate("q", "d", "b", T + 2)).holder == "b"


async def test_racing_holders_of_one_deduplication_id_get_one_answer(store: EventStore):
    leases = store.leases()
    got = await asyncio.gather(*(leases.deduplicate("q", "d", f"h{i}", T) for i in range(8)))
    assert len({g.holder for g in got}) == 1
    assert sum(1 for i, g in enumerate(got) if g.holder == f"h{i}") == 1
