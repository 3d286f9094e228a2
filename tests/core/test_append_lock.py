"""``AppendLock``: a free lock is taken without a coroutine, a held one queues fairly, and a
waiter cancelled while queued neither takes nor leaks the lock."""

from __future__ import annotations

import asyncio

import pytest

import loom.runtime  # noqa: F401  # pyright: ignore[reportUnusedImport]  # the import order the engine uses
from loom.kernel.journal import AppendLock


async def test_a_held_lock_queues_its_waiters_in_order() -> None:
    lock, order = AppendLock(), list[int]()

    async def hold(i: int) -> None:
        async with lock:
            order.append(i)
            await asyncio.sleep(0.001)

    await asyncio.gather(*(hold(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert not lock.locked()


async def test_it_is_released_when_the_body_raises() -> None:
    lock = AppendLock()
    with pytest.raises(ValueError):
        async with lock:
            assert lock.locked()
            raise ValueError
    assert not lock.locked()


async def test_a_cancelled_waiter_does_not_take_the_lock() -> None:
    lock, entered = AppendLock(), list[str]()

    async def wait() -> None:
        async with lock:
            entered.append("waiter")

    async with lock:
        waiter = asyncio.create_task(wait())
        await asyncio.sleep(0)  # queued behind the holder
        waiter.cancel()
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert entered == [] and not lock.locked()
    async with lock:  # free again, on the fast path
        entered.append("next")
    assert entered == ["next"]
