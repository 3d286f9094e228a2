"""The web console over 100,000 executions on SQLite: how fast each page answers.

Seeds N executions straight through the store (``EventStore.create`` and ``append``,
thousands at a time so the group commit batches them), spread over five flows and every
status, then asks the worker for console pages through its WSGI app in this process (the
page is routed, authorized, read from the store and rendered exactly as ``loom serve``
answers it; only the socket is left out) and reports the median and 95th percentile time
of each page.

Run from the repository root::

    python bench/console_list.py [--executions 100000] [--repeat 30] [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loom import FlowContext, Loom  # noqa: E402
from loom.events import (  # noqa: E402
    EffectInDoubt,
    EffectStarted,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionStarted,
)
from loom.runtime import Runtime  # noqa: E402
from loom.store import AppendRequest, SqliteEventStore, StatusChange  # noqa: E402
from loom.workers.server import WorkerHandler, create_wsgi_app  # noqa: E402

FLOWS = ("checkout", "refund", "reminder", "signup", "report")
# Of every 100 executions: most finished, a few live, one in doubt (what a shop's log holds).
STATUSES = ["completed"] * 80 + ["failed"] * 6 + ["suspended"] * 8 + ["running"] * 3
STATUSES += ["cancelled"] * 2 + ["in_doubt"]

app = Loom("bench-console")


@app.flow("checkout")
async def checkout(ctx: FlowContext, value: Any) -> Any:
    """Never run here: the benchmark reads what the store holds."""
    return value


async def _one(store: SqliteEventStore, i: int) -> None:
    eid = f"{FLOWS[i % 5]}-{i:07d}"
    started = ExecutionStarted(execution_id=eid, flow=FLOWS[i % 5], input={"n": i})
    await store.create(started)
    status = STATUSES[i % len(STATUSES)]
    if status == "running":
        return
    now = time.time()
    events: list[Any] = [ExecutionClaimed(seq=2, holder="w", until=0.0, at=now)]
    if status in ("completed", "failed", "cancelled"):
        events = [ExecutionCompleted(seq=2, output=i, at=now)]
    elif status == "in_doubt":  # a real doubt: an intent record and no outcome
        key = f"{eid}:1"
        events = [
            EffectStarted(step_id="1", effect="charge", idempotency_key=key, seq=2, at=now),
            EffectInDoubt(step_id="1", effect="charge", seq=3, at=now),
        ]
    wake = now + 3600 if status == "suspended" else None
    await store.append(AppendRequest(eid, 1, events, StatusChange(status, wake_at=wake)))


async def seed(path: Path, n: int, batch: int = 2000) -> float:
    """Create ``n`` executions; the seconds it took."""
    store = SqliteEventStore(path)
    started = time.perf_counter()
    for first in range(0, n, batch):
        await asyncio.gather(*(_one(store, i) for i in range(first, min(n, first + batch))))
    await store.aclose()
    return time.perf_counter() - started


PAGES = [
    ("list, first page with counts", "/console/executions"),
    ("list, status=in_doubt", "/console/executions?status=in_doubt"),
    ("list, flow=refund", "/console/executions?flow=refund"),
    ("list, flow+status+time", "/console/executions?flow=signup&status=failed&from=0"),
    ("list, search by id prefix", "/console/executions?q=report-00999"),
    ("list, page 1,000 deep (cursor)", None),
    ("in-doubt queue (50 executions)", "/console/in-doubt"),
    ("one execution's timeline", "/console/executions/checkout-0000000"),
]


def _deep_cursor(store: SqliteEventStore) -> str:
    """The URL of the list's 1,001st page (after 50,000 rows)."""

    async def find() -> str:
        rows = await store.list(limit=50_000)
        at, eid = rows[-1].cursor
        await store.aclose()
        return f"/console/executions?after_t={at!r}&after_id={eid}"

    return asyncio.run(find())


def measure(path: Path, repeat: int) -> list[tuple[str, float, float, int]]:
    """``(page, median ms, p95 ms, rows)`` for each page."""
    runtime = Runtime(app, SqliteEventStore(path))
    client = create_wsgi_app(WorkerHandler(runtime)).test_client()
    results: list[tuple[str, float, float, int]] = []
    for name, url in PAGES:
        target = url or _deep_cursor(SqliteEventStore(path))
        times: list[float] = []
        body = ""
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(target)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (target, response.status_code)
            body = response.get_data(as_text=True)
        rows = body.count("<tr data-id=")
        times.sort()
        results.append((name, statistics.median(times), times[int(len(times) * 0.95) - 1], rows))
    return results


STORE_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("count_by_status()", "count", {}),
    ("count_by_status(flow='refund')", "count", {"flow": "refund"}),
    ("browse(limit=50)", "browse", {}),
    ("browse(status='in_doubt')", "browse", {"status": "in_doubt"}),
    ("browse(flow='refund')", "browse", {"flow": "refund"}),
    (
        "browse(flow, status, created_from)",
        "browse",
        {"flow": "signup", "status": "failed", "created_from": 0.0},
    ),
    ("browse(id_prefix='report-00999')", "browse", {"id_prefix": "report-00999"}),
]


def measure_store(path: Path, repeat: int) -> list[tuple[str, float]]:
    """``(call, median ms)`` of the store calls the pages make, without HTTP or rendering."""
    from loom.store.browse import BrowseQuery

    async def run() -> list[tuple[str, float]]:
        store = SqliteEventStore(path)
        results: list[tuple[str, float]] = []
        for name, kind, kwargs in STORE_CALLS:
            times: list[float] = []
            for _ in range(repeat):
                started = time.perf_counter()
                if kind == "count":
                    await store.count_by_status(**kwargs)
                else:
                    await store.browse(BrowseQuery(**kwargs))
                times.append((time.perf_counter() - started) * 1000)
            results.append((name, statistics.median(times)))
        await store.aclose()
        return results

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--db", type=Path, default=None, help="reuse a seeded database")
    args = parser.parse_args()
    path = args.db or Path(tempfile.mkdtemp(prefix="loom-bench-console-")) / "loom.db"
    if not path.exists():
        print(f"seeding {args.executions:,} executions into {path} ...", flush=True)
        print(f"seeded in {asyncio.run(seed(path, args.executions)):.1f} s", flush=True)
    size = path.stat().st_size / 2**20
    print(f"database: {size:.0f} MiB; load average {os.getloadavg()[0]:.1f}\n")
    print("| page | median | p95 | rows shown |\n|---|---:|---:|---:|")
    for name, median, p95, rows in measure(path, args.repeat):
        print(f"| {name} | {median:.1f} ms | {p95:.1f} ms | {rows} |")
    print("\n| store call | median |\n|---|---:|")
    for name, median in measure_store(path, args.repeat):
        print(f"| `{name}` | {median:.2f} ms |")


if __name__ == "__main__":
    main()
