"""One side of ``bench/scale.py``: run by a checkout's own interpreter, prints JSON.

Measures, on the Firestore emulator named by ``FIRESTORE_EMULATOR_HOST``, with whatever
``loom`` this interpreter imports (this checkout's, or an older one's, to compare):

* ``purge``: finished executions (each with its start, three pages of events and its end)
  deleted a second by the purge as a deployment runs it: one purge per shard at once where
  the store has shards and the engine purge jobs, else the one sequential purge;
* ``admit``: grants a second on one queue, concurrency 200, each execution holding its
  lease 0.2 s, with a backlog: the admit passes (one a second) and takes where the engine
  has them, else ``acquire`` and ``release`` on the queue's document, from 20 callers;
* ``list``: the latency and the billed reads of the console's first page (50 newest), a
  status page, and a sweep's first page of running executions (every shard's at once where
  the sweep runs a job per shard), over 2,000 executions.

Run by ``bench/scale.py``; alone: ``python bench/scale_side.py purge``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import statistics
import time
import uuid
from typing import Any

from loom.events import EffectCompleted, ExecutionCompleted, ExecutionStarted
from loom.store.base import AppendRequest, StatusChange
from loom.store.leases import LeaseRequest
from loom_gcp.firestore import FirestoreEventStore

PROJECT = "loom-bench"
SHARDS = 64  # Terraform's firestore_shards


def new_store() -> FirestoreEventStore:
    database = f"b{uuid.uuid4().hex[:20]}"
    if "shards" in inspect.signature(FirestoreEventStore).parameters:
        return FirestoreEventStore(project=PROJECT, database=database, shards=SHARDS)  # type: ignore[call-arg]
    return FirestoreEventStore(project=PROJECT, database=database)


async def fill(store: FirestoreEventStore, n: int, finished: bool, at: int = 16) -> list[str]:
    """``n`` executions, ``at`` at a time: start, three pages of steps, and the end."""
    ids = [f"e{uuid.uuid4().hex[:12]}" for _ in range(n)]

    async def one(eid: str) -> None:
        await store.create(ExecutionStarted(execution_id=eid, flow="f", input=1))
        for seq in (2, 3, 4):
            step = EffectCompleted(seq=seq, step_id=str(seq), effect="x", output=seq)
            await store.append(AppendRequest(eid, seq - 1, [step]))
        if finished:
            done = ExecutionCompleted(seq=5, output=1)
            await store.append(AppendRequest(eid, 4, [done], StatusChange("completed")))
        else:
            step = EffectCompleted(seq=5, step_id="5", effect="x", output=5)
            await store.append(AppendRequest(eid, 4, [step], StatusChange("running")))

    gate = asyncio.Semaphore(at)

    async def bounded(eid: str) -> None:
        async with gate:
            await one(eid)

    await asyncio.gather(*(bounded(e) for e in ids))
    return ids


async def purge(n: int) -> dict[str, Any]:
    store = new_store()
    await fill(store, n, finished=True)
    cutoff = time.time() + 60
    started = time.perf_counter()
    if hasattr(store, "shard_count"):  # this engine: one purge job per shard, all at once
        from loom.ops.retention import PURGE_PAGE  # type: ignore[attr-defined]

        async def shard(k: int) -> int:
            done, after = 0, None
            while True:
                report = await store.purge(cutoff, limit=PURGE_PAGE, after=after, shard=k)  # type: ignore[call-arg]
                done += len(report.purged)
                after = report.cursor
                if after is None:
                    return done

        counts = await asyncio.gather(*(shard(k) for k in range(await store.shard_count())))  # type: ignore[attr-defined]
        purged = sum(counts)
    else:  # the one purge of the route, batch after batch
        from loom.ops.retention import purge_finished

        purged = (await purge_finished(store, None, older_than=-60.0)).purged
    seconds = time.perf_counter() - started
    await store.aclose()
    assert purged == n, (purged, n)
    return {"executions": n, "seconds": seconds, "per_second": n / seconds}


async def admit(seconds: float = 12.0, limit: int = 200, hold: float = 0.2) -> dict[str, Any]:
    store = new_store()
    leases = store.leases()
    held: set[str] = set()
    peak, granted = 0, 0
    stop = time.monotonic() + seconds
    if hasattr(leases, "admit"):  # passes, as the engine runs them on Firestore
        from loom.store.leases import QueueLimits

        backlog = [f"w{i:05d}" for i in range(int(seconds * 150))]
        await asyncio.gather(
            *(
                leases.enqueue(LeaseRequest("q", h, time.time(), 60.0, limit=limit, owner="-"))
                for h in backlog
            )  # type: ignore[attr-defined]
        )
        runs: set[asyncio.Task[None]] = set()

        async def run(holder: str) -> None:
            nonlocal peak, granted
            request = LeaseRequest("q", holder, time.time(), 60.0, limit=limit, owner=f"{holder}/1")
            assert await leases.take(request)  # type: ignore[attr-defined]
            held.add(holder)
            peak = max(peak, len(held))
            granted += 1
            await asyncio.sleep(hold)
            held.discard(holder)
            await leases.release("q", holder, f"{holder}/1")

        while time.monotonic() < stop:  # one pass a second
            tick = time.monotonic()
            done = await leases.admit("q", 0, QueueLimits(limit=limit), time.time(), 100)  # type: ignore[attr-defined]
            for w in done.granted:
                task = asyncio.ensure_future(run(w.holder))
                runs.add(task)
                task.add_done_callback(runs.discard)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        await asyncio.gather(*runs)
    else:  # acquire and release on the queue's document, from 20 callers
        counter = iter(range(10**9))

        async def caller() -> None:
            nonlocal peak, granted
            while time.monotonic() < stop:
                holder = f"h{next(counter)}"
                request = LeaseRequest(
                    "q", holder, time.time(), 60.0, limit=limit, owner=f"{holder}/1"
                )
                if not await leases.acquire(request):
                    await asyncio.sleep(0.05)
                    continue
                held.add(holder)
                peak = max(peak, len(held))
                granted += 1
                await asyncio.sleep(hold)
                held.discard(holder)
                await leases.release("q", holder, f"{holder}/1")

        await asyncio.gather(*(caller() for _ in range(20)))
    await store.aclose()
    assert peak <= limit
    return {"grants": granted, "seconds": seconds, "per_second": granted / seconds, "peak": peak}


async def listing(n: int = 2000, rounds: int = 15) -> dict[str, Any]:
    from loom.store.browse import BrowseQuery

    store = new_store()
    ids = await fill(store, n // 2, finished=True)
    ids += await fill(store, n // 2, finished=False)
    timings: dict[str, list[float]] = {"newest": [], "by_status": [], "sweeper_page": []}
    reads: dict[str, int] = {}

    async def sweeper_page() -> list[Any]:
        if hasattr(store, "list_shard"):  # a sweep job per shard, all at once
            count: int = await store.shard_count()  # type: ignore[attr-defined]
            pages = await asyncio.gather(
                *(
                    store.list_shard(k, "running", limit=500, oldest_first=True)
                    for k in range(count)
                )  # type: ignore[attr-defined]
            )
            return [r for page in pages for r in page]
        return await store.list("running", limit=500, oldest_first=True)

    for _ in range(rounds):
        for name, call in (
            ("newest", lambda: store.browse(BrowseQuery(limit=50))),
            ("by_status", lambda: store.browse(BrowseQuery(status="completed", limit=50))),
            ("sweeper_page", sweeper_page),
        ):
            store.reset_ops()
            started = time.perf_counter()
            rows = await call()
            timings[name].append(time.perf_counter() - started)
            reads[f"{name}_reads"] = store.ops["reads"]
            assert rows
    await store.aclose()
    ms = {f"{name}_ms": statistics.median(ts) * 1000 for name, ts in timings.items()}
    return ms | reads | {"executions": len(ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["purge", "admit", "list"])
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    run = {"purge": lambda: purge(args.n), "admit": admit, "list": listing}[args.what]
    print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
