"""``loom replay-check`` over many suspended executions on the Firestore emulator.

Seeds N executions of a two-step flow suspended at its gate through the store itself
(``FirestoreEventStore.create`` and one ``append`` each, many in flight, so the logs are in
the layout the running release writes), a few of them recorded by a different version of
the code so the check has something to find, then runs the real
``loom replay-check`` command as a child process and reads its wall time and peak RSS from
the kernel (``wait4``). Run at two sizes, the peak RSS shows whether memory grows with the
number of executions (it must not: the check pages through the summaries).

Run from the repository root (starts the emulator unless ``FIRESTORE_EMULATOR_HOST`` is set)::

    python bench/replay_check.py [--counts 1000,10000] [--diverging 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for bench.* and tests.procs

from loom import EffectContext, FlowContext, Loom  # noqa: E402

PROJECT = "loom-bench"

app = Loom("bench")  # the code the check replays against (LOOM_APP=bench.replay_check:app)


@app.effect("reserve")
async def reserve(ctx: EffectContext, order: str) -> str:
    """First step."""
    return f"reserved {order}"


@app.effect("ship")
async def ship(ctx: EffectContext, order: str) -> str:
    """After the gate."""
    return f"shipped {order}"


@app.flow("order")
async def order(ctx: FlowContext, order_id: str) -> list[str]:
    """Reserve, wait for approval, ship."""
    done = [await ctx.execute("reserve", order_id)]
    await ctx.suspend("approval", order_id)
    done.append(await ctx.execute("ship", order_id))
    return done


def _history(eid: str, first_effect: str) -> tuple[Any, list[Any]]:
    """The start event, and what one execute call appended after it: the claim, the first
    step and the suspension at the gate (numbered from seq 2)."""
    from loom import events as ev

    started = ev.ExecutionStarted(execution_id=eid, flow="order", input=eid, at=1.0)
    rest: list[Any] = [
        ev.ExecutionClaimed(holder="seed", until=1.0),
        ev.EffectCompleted(step_id="1", effect=first_effect, output=f"reserved {eid}"),
        ev.ExecutionSuspended(step_id="2", on="approval", correlation_key=eid),
    ]
    return started, [e.model_copy(update={"seq": i, "at": 1.0}) for i, e in enumerate(rest, 2)]


async def seed(database: str, count: int, diverging: int) -> float:
    """Write ``count`` suspended executions, ``diverging`` of them by other code; seconds."""
    from loom.store import AppendRequest, StatusChange
    from loom_gcp.firestore import FirestoreEventStore

    store = FirestoreEventStore(project=PROJECT, database=database)
    in_flight = asyncio.Semaphore(32)  # the emulator serializes commits: more only queue
    started = time.perf_counter()

    async def write(i: int) -> None:
        eid = f"e{i:07d}"
        start, rest = _history(eid, "reserve-old" if i < diverging else "reserve")
        async with in_flight:
            created, _ = await store.create(start)
            assert created, eid
            await store.append(AppendRequest(eid, 1, rest, StatusChange("suspended")))

    await asyncio.gather(*(write(i) for i in range(count)))
    await store.aclose()
    return time.perf_counter() - started


def check(database: str) -> dict[str, Any]:
    """Run ``loom replay-check`` as a child; its wall time, peak RSS and summary line."""
    env = {
        **os.environ,
        "LOOM_APP": "bench.replay_check:app",
        "LOOM_STORE": f"firestore://{PROJECT}/{database}",
    }
    command = [sys.executable, "-m", "loom", "replay-check", "--json", "--sample=0"]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    lines = [json.loads(line) for line in out.splitlines()]
    return {
        "seconds": seconds,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # kilobytes on Linux
        "exit": os.waitstatus_to_exitcode(status),
        "summary": lines[-1],
        "diverging": sorted(x["execution_id"] for x in lines if x["kind"] == "divergence"),
    }


def main() -> None:
    from bench.firestore_ops import emulator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000", help="Sizes to measure.")
    parser.add_argument("--diverging", type=int, default=3, help="Executions by other code.")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with emulator():
        for count in (int(c) for c in args.counts.split(",")):
            database = f"r{uuid.uuid4().hex[:20]}"
            seeded = asyncio.run(seed(database, count, args.diverging))
            result = check(database)
            expected = [f"e{i:07d}" for i in range(min(args.diverging, count))]
            assert result["summary"]["checked"] == count, result
            assert result["diverging"] == expected and result["exit"] == 1, result
            rows.append({"executions": count, "seed_seconds": round(seeded, 2), **result})
            print(
                f"{count} suspended executions: seeded in {seeded:.1f} s; replay-check "
                f"{result['seconds']:.1f} s, peak RSS {result['peak_rss_mib']:.0f} MiB, "
                f"{len(result['diverging'])} diverging found (exit {result['exit']})",
                flush=True,
            )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
