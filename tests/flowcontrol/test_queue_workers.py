"""The queue limits across worker processes, on SQLite (on disk) and the Firestore emulator.

Three real worker processes (``functions-framework --target worker``) share one store. The
test plays Cloud Tasks: it POSTs ``/execute`` for every execution not finished yet, spread
over the workers, several at a time, and again for those that answered still waiting. From
the executions' logs (first claim to completion), it checks that no more than the queue's
limit ever ran at once, that executions of one partition key never overlapped, and that all
completed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Event, Lock

import httpx
import pytest

from loom import events as ev
from loom.config import open_store
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from tests import procs
from tests.flowcontrol import queue_app
from tests.functions.conftest import start_worker

# The Firestore emulator serializes the grants on one document: 200 executions take minutes
# there, so the emulator runs 40 (still eight times the limit) and SQLite the full 200.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
APP = "tests.flowcontrol.queue_app:app"
ANSWER = 75.0  # s a worker may take to answer (a lease change retries for up to 30 s)


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'loom.db'}"
    request.getfixturevalue("firestore_emulator")
    return f"firestore://loom-test/q{uuid.uuid4().hex[:20]}"


@pytest.fixture
def three_workers(store_url: str, tmp_path: Path) -> Iterator[list[str]]:
    env = {"LOOM_APP": APP, "LOOM_STORE": store_url, "LOOM_RESUME_SECRET": "s" * 24}
    servers: list[procs.Server] = []
    try:
        for n in range(3):
            servers.append(start_worker(f"worker-{n}", env, tmp_path))
        yield [f"http://{s.host}" for s in servers]
    finally:
        for server in servers:
            procs.stop(server)


async def _seed(url: str, plan: Sequence[tuple[str, str, str | None]]) -> None:
    runtime = Runtime(queue_app.app, open_store(url))
    for eid, queue, key in plan:
        value = {"key": key or "-", "seconds": 0.05}
        await runtime.start("work", value, execution_id=eid, run=False, queue=QueueRef(queue, key))
    await runtime.store.aclose()


def _drive(bases: list[str], ids: list[str], threads: int = 12, budget: float = 600.0) -> int:
    """Play the dispatcher: POST /execute until every execution completed; the calls made.

    Fails fast, naming what was stuck, when a worker does not answer within ``ANSWER`` s or
    the executions are not all completed within ``budget`` s (never hangs the suite).
    """
    todo = deque(ids)
    lock = Lock()
    calls = itertools.count()
    hosts = itertools.cycle(bases)
    deadline = time.monotonic() + budget
    failed = Event()  # one thread's failure stops the others at once

    def worker() -> None:
        try:
            drive()
        except BaseException:
            failed.set()
            raise

    def drive() -> None:
        with httpx.Client(timeout=ANSWER) as http:
            while True:
                with lock:
                    if not todo or failed.is_set():
                        return
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{len(todo)} not completed in {budget} s")
                    eid, base = todo.popleft(), next(hosts)
                next(calls)
                body = {"executionPackage": {"execution_id": eid}}
                try:
                    answer = http.post(f"{base}/execute", json=body)
                except httpx.TimeoutException as exc:
                    raise AssertionError(f"{base} did not answer for {eid} in {ANSWER} s") from exc
                done = answer.status_code == 200 and answer.json()["status"] == "completed"
                if not done:
                    with lock:
                        todo.append(eid)

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(worker) for _ in range(threads)]:
            future.result()
    return next(calls)


async def _intervals(url: str, ids: list[str]) -> dict[str, tuple[float, float, str]]:
    store = open_store(url)
    found: dict[str, tuple[float, float, str]] = {}
    for eid in ids:
        events = await store.read(eid)
        claim = next(e.at for e in events if isinstance(e, ev.ExecutionClaimed))
        end = next(e.at for e in events if isinstance(e, ev.ExecutionCompleted))
        started = events[0]
        assert isinstance(started, ev.ExecutionStarted)
        found[eid] = (claim, end, started.partition_key or "-")
    await store.aclose()
    return found


def _peak(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = peak = 0
    for _, step in edges:  # at a tie an end (-1) sorts first: touching spans do not overlap
        running += step
        peak = max(peak, running)
    return peak


def test_many_executions_with_concurrency_5_across_3_workers(
    store_url: str, three_workers: list[str]
) -> None:
    count = 200 if store_url.startswith("sqlite") else 40
    ids = [f"five-{i}" for i in range(count)]
    asyncio.run(_seed(store_url, [(eid, "five", None) for eid in ids]))
    calls = _drive(three_workers, ids)
    spans = asyncio.run(_intervals(store_url, ids))
    peak = _peak([(a, b) for a, b, _ in spans.values()])
    print(f"queue five: peak {peak} in flight over {len(ids)} executions, {calls} calls")
    assert 2 <= peak <= 5, peak
    assert calls > len(ids)  # some waited and were delivered again


def test_a_partition_key_serializes_across_workers(
    store_url: str, three_workers: list[str]
) -> None:
    plan = [(f"serial-{i}", "serial", f"k{i % 3}") for i in range(24)]
    asyncio.run(_seed(store_url, plan))
    _drive(three_workers, [eid for eid, _, _ in plan])
    spans = asyncio.run(_intervals(store_url, [eid for eid, _, _ in plan]))
    for key in ("k0", "k1", "k2"):
        assert _peak([(a, b) for a, b, k in spans.values() if k == key]) == 1
    assert _peak([(a, b) for a, b, _ in spans.values()]) >= 2  # keys ran side by side
    listed = httpx.get(f"{three_workers[0]}/queues", timeout=ANSWER).json()["queues"]
    serial = next(q for q in listed if q["name"] == "serial")
    assert (serial["in_flight"], serial["waiting"]) == (0, 0)  # all released, none waiting
