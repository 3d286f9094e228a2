"""Firestore paused (SIGSTOP), or killed and restarted, under the store.

This module runs its own Firestore emulator, so pausing it hurts no other test. A paused
JVM keeps its TCP connections open and answers nothing, like a hung or partitioned backend;
a killed one refuses connections. Real Firestore never loses an acknowledged write, so before
a kill the test exports the emulator's data and restarts it from that export on the same
port (nothing is written between the export and the kill).
The emulator is always continued (SIGCONT) before it is stopped, and stopped by its PID.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from loom.errors import StoreUnavailableError
from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, EventStore, Snapshot
from loom_gcp.firestore import FirestoreEventStore
from tests.faults.emulator import PROJECT, Emulator

pytestmark = pytest.mark.slow

# The store's knobs under a fault. Setup and checks afterwards use the defaults (5 s, 20 s):
# on a busy machine a cold emulator JVM takes seconds to answer its first calls. Every store
# method waits its whole deadline here, so a longer one only makes the suite slower.
TIMEOUT, DEADLINE = 2.0, 4.0
# What a store call may take beyond its deadline: the asyncio backstop and a busy machine.
SLACK = 3.0


@pytest.fixture
def resumed(emulator: Emulator) -> Iterator[Emulator]:
    """The emulator, continued after the test whatever happened."""
    try:
        yield emulator
    finally:
        emulator.signal(signal.SIGCONT)


def step(seq: int, step_id: str) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=seq, at=1.0)


@pytest.fixture
async def store(emulator: Emulator) -> AsyncIterator[FirestoreEventStore]:
    """A store with tight knobs, on a database holding ``e1`` (seeded with default knobs)."""
    database = f"f{uuid.uuid4().hex[:24]}"
    seed = FirestoreEventStore(project=PROJECT, database=database)
    await seed.create(ExecutionStarted(execution_id="e1", flow="f"))
    await seed.append(AppendRequest("e1", 1, [step(2, "a")]))
    await seed.save_snapshot("e1", Snapshot(2, "{}"))
    await seed.aclose()
    s = FirestoreEventStore(project=PROJECT, database=database, timeout=TIMEOUT, deadline=DEADLINE)
    await recovered(s)
    yield s
    await s.aclose()


async def recovered(store: FirestoreEventStore) -> None:
    """Ping until the store answers (a busy machine may need a few rounds), at most 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return await store.ping()
        except StoreUnavailableError:
            assert time.monotonic() < deadline, "the store never recovered"


def every_call(store: EventStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of each store method, on an execution whose log ends at seq 2."""
    return {
        "create": lambda: store.create(ExecutionStarted(execution_id="e2", flow="f")),
        "append": lambda: store.append(AppendRequest("e1", 2, [step(3, "b")])),
        "load": lambda: store.load("e1"),
        "read": lambda: store.read("e1"),
        "save_snapshot": lambda: store.save_snapshot("e1", Snapshot(2, "{}")),
        "summary": lambda: store.summary("e1"),
        "list": lambda: store.list(),
        "ping": lambda: store.ping(),
    }


async def assert_unavailable_in_time(store: EventStore) -> None:
    for name, call in every_call(store).items():
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            await call()
        took = time.monotonic() - started
        assert took < DEADLINE + SLACK, f"{name} took {took:.1f}s"


async def test_a_paused_emulator_makes_every_call_unavailable_in_time(
    store: FirestoreEventStore, resumed: Emulator
) -> None:
    resumed.signal(signal.SIGSTOP)
    await assert_unavailable_in_time(store)
    resumed.signal(signal.SIGCONT)
    # The same store (and gRPC channel) works again, and nothing was half-written.
    await recovered(store)
    assert [e.seq for e in await store.read("e1")] == [1, 2]
    assert await store.append(AppendRequest("e1", 2, [step(3, "b")])) == 3


async def test_a_killed_emulator_is_unavailable_until_it_is_back(
    store: FirestoreEventStore, emulator: Emulator
) -> None:
    saved = emulator.export(store._client._database)
    emulator.kill()
    try:
        await assert_unavailable_in_time(store)
    finally:
        emulator.start(import_data=saved)
    await recovered(store)
    loaded = await store.load("e1")
    assert loaded.snapshot == Snapshot(2, "{}") and loaded.events == []
    assert await store.append(AppendRequest("e1", 2, [step(3, "b")])) == 3
