"""Bulk operations and forks through children on SQLite on disk.

* A bulk cancel of N executions waiting on a gate (``Runtime.bulk("cancel", ...)``), beside
  the same N cancels made one by one (``Runtime.cancel``), each on a fresh store: what the
  selection and the report cost on top of the calls themselves. A dry run alone (the
  selection: one indexed page walk) is timed too.
* A re-drive of a failed execution whose prefix holds K children (reused, not started again)
  and K published values, beside one whose prefix holds K effect steps: what reusing
  children costs a fork.

Medians of ``--runs`` runs. Run from the repository root::

    python bench/bulk.py [--count 500] [--children 20] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loom import EffectContext, FlowContext, Loom  # noqa: E402
from loom.ops.bulk import Selection  # noqa: E402
from loom.ops.deadletters import find, redrive  # noqa: E402
from loom.runtime import Runtime  # noqa: E402
from loom.store import SqliteEventStore  # noqa: E402

app = Loom("bench-bulk")
BROKEN = {"charge": True}


@app.effect("step")
def step(ctx: EffectContext, n: int) -> int:
    """A no-op step."""
    return n


@app.effect("charge")
def charge(ctx: EffectContext, n: int) -> int:
    """Fails while ``BROKEN``."""
    if BROKEN["charge"]:
        raise RuntimeError("down")
    return n


@app.flow("waiting")
async def waiting(ctx: FlowContext, _: None) -> Any:
    """Waits on a gate."""
    return await ctx.suspend("go", f"{ctx.execution_id}:go")


@app.flow("leaf")
async def leaf(ctx: FlowContext, n: int) -> int:
    """A child: one step."""
    return await ctx.execute(step, n)


@app.flow("with_children")
async def with_children(ctx: FlowContext, k: int) -> int:
    """K children and K published values, then a charge that fails once."""
    total = 0
    for n in range(k):
        total += await ctx.execute_flow(leaf, n)
        await ctx.set_event("progress", n)
    return total + await ctx.execute(charge, k)


@app.flow("with_steps")
async def with_steps(ctx: FlowContext, k: int) -> int:
    """K steps, then a charge that fails once."""
    total = 0
    for n in range(k):
        total += await ctx.execute(step, n)
    return total + await ctx.execute(charge, k)


Body = Callable[[Runtime, list[str]], Awaitable[Any]]


async def _timed_cancel(count: int, body: Body) -> float:
    with tempfile.TemporaryDirectory() as where:
        store = SqliteEventStore(Path(where) / "loom.db")
        rt = Runtime(app, store)
        ids = [f"w-{n}" for n in range(count)]
        for eid in ids:
            await rt.start("waiting", None, execution_id=eid)
        began = time.perf_counter()
        await body(rt, ids)
        took = time.perf_counter() - began
        await store.aclose()
    return took


async def _one_by_one(rt: Runtime, ids: list[str]) -> None:
    for eid in ids:
        await rt.cancel(eid, "bench", by="ops")


async def _bulk(rt: Runtime, ids: list[str]) -> None:
    report = await rt.bulk("cancel", Selection(flow="waiting", limit=len(ids)), by="ops")
    assert report.count == len(ids), report.count


async def _dry(rt: Runtime, ids: list[str]) -> None:
    report = await rt.bulk("cancel", Selection(flow="waiting", limit=len(ids)), dry_run=True)
    assert report.count == len(ids)


async def _timed_redrive(flow: str, k: int) -> float:
    with tempfile.TemporaryDirectory() as where:
        store = SqliteEventStore(Path(where) / "loom.db")
        rt = Runtime(app, store)
        BROKEN["charge"] = True
        assert (await rt.start(flow, k, execution_id="x")).status == "failed"
        BROKEN["charge"] = False
        letters = await find(rt, "failed")
        began = time.perf_counter()
        (done,) = await redrive(rt, letters, by="ops")
        took = time.perf_counter() - began
        assert done.status == "completed", done
        await store.aclose()
    return took


def _median(runs: int, make: Callable[[], Awaitable[float]]) -> float:
    return statistics.median(asyncio.run(make()) for _ in range(runs))


def main() -> None:
    """Run the measurements and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--children", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    n, k, runs = args.count, args.children, args.runs
    single = _median(runs, lambda: _timed_cancel(n, _one_by_one))
    bulk = _median(runs, lambda: _timed_cancel(n, _bulk))
    dry = _median(runs, lambda: _timed_cancel(n, _dry))
    kids = _median(runs, lambda: _timed_redrive("with_children", k))
    steps = _median(runs, lambda: _timed_redrive("with_steps", k))
    print("| what | median | per execution or ratio |")
    print("|---|---:|---:|")
    print(f"| {n} cancels, one by one | {single:.3f} s | {single / n * 1000:.2f} ms |")
    print(f"| bulk cancel of the same {n} | {bulk:.3f} s | {bulk / n * 1000:.2f} ms |")
    print(f"| bulk / one by one | | {bulk / single:.2f} x |")
    print(
        f"| dry run of that bulk cancel (selection only) | {dry:.3f} s | {dry / n * 1000:.2f} ms |"
    )
    print(f"| re-drive through {k} children and {k} published values | {kids * 1000:.1f} ms | |")
    print(f"| re-drive through {k} effect steps | {steps * 1000:.1f} ms | |")
    print(f"| children / steps | | {kids / steps:.2f} x |")


if __name__ == "__main__":
    main()
