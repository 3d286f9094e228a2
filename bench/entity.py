"""An entity flow fed messages one at a time, with and without continue-as-new, on SQLite.

Each message is one ``Runtime.send``: the message is appended and the entity runs inline
until it waits for the next one (a replay of its current run, then one ``set_event``). An
entity that never continues replays its whole life on every message, so the cost per
message grows with its age; one that continues every ``--per-run`` messages replays at most
that many, so the cost stays flat. Printed: milliseconds per message over the first and the
last ``--window`` messages, and the events replayed by the last execute call.

Run from the repository root::

    python bench/entity.py [--messages 1000] [--per-run 100] [--window 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loom import FlowContext, Loom  # noqa: E402
from loom.runtime import Runtime  # noqa: E402
from loom.store import SqliteEventStore  # noqa: E402

app = Loom("bench-entity")


@app.flow("forever")
async def forever(ctx: FlowContext, total: int) -> None:
    """Never continues: its history grows with every message."""
    while True:
        total += await ctx.recv("add")
        await ctx.set_event("total", total)


@app.flow("continuing")
async def continuing(ctx: FlowContext, args: list[int]) -> None:
    """Continues as new every ``args[1]`` messages."""
    total, per_run = args
    for _ in range(per_run):
        total += await ctx.recv("add")
        await ctx.set_event("total", total)
    await ctx.continue_as_new([total, per_run])


async def feed(flow: str, value: object, messages: int) -> tuple[list[float], int, int]:
    """Send ``messages`` messages one by one; per-message seconds, the current run's events
    at the end, and the total the entity published."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteEventStore(Path(tmp) / "loom.db")
        rt = Runtime(app, store)
        await rt.start(flow, value, execution_id="e")
        times: list[float] = []
        for n in range(messages):
            began = time.perf_counter()
            await rt.send("e", "add", n)
            times.append(time.perf_counter() - began)
        state = await rt.load_state("e")
        total = await rt.get_event("e", "total")
        await store.aclose()
        return times, state.last_seq - state.run_started_seq + 1, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--per-run", type=int, default=100)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()
    expected = sum(range(args.messages))
    print("| entity | ms/message, first | ms/message, last | events in current run |")
    print("|---|---|---|---|")
    for label, flow, value in (
        ("never continues", "forever", 0),
        (f"continues every {args.per_run}", "continuing", [0, args.per_run]),
    ):
        times, events, total = asyncio.run(feed(flow, value, args.messages))
        assert total == expected, (label, total, expected)
        first = statistics.median(times[: args.window]) * 1000
        last = statistics.median(times[-args.window :]) * 1000
        print(f"| {label} | {first:.2f} | {last:.2f} | {events} |")


if __name__ == "__main__":
    main()
