"""Group commit on SQLite, measured side by side against another checkout of the engine.

    python bench/group_commit.py --baseline ../loom-main            # print the table
    python bench/group_commit.py --baseline ../loom-main --record   # and add it to RESULTS.md

Each round runs one child process per checkout, alternating, so a noisy disk or a busy CPU
hits both alike; every child imports the engine of its own checkout. Figures are medians
over rounds; ratios are baseline / this checkout (above 1: this checkout is faster).
"""

# No `from __future__ import annotations`: the flows below are defined in a function, after
# the engine to measure is importable, and the engine resolves their annotations.

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from alternate import commit_ms, compare  # pyright: ignore[reportMissingImports]

HERE = Path(__file__).resolve().parent
RAM_DISK = "/dev/shm"
SIDE_BY_SIDE = "## Side-by-side runs"
SIDE_BY_SIDE_INTRO = (
    "Dated comparisons of two checkouts in one interleaved run; `bench/run.py` keeps this "
    "section when it rewrites its own tables."
)
FIGURES = {
    "concurrent_s": ("50 concurrent 10-step flows, in-loop (CLI, `Runtime`)", "s", 0.05),
    "served_s": ("50 concurrent 10-step flows, served (writer thread)", "s", 0.05),
    "step_ms": ("sequential durable no-op step, marginal", "ms", None),
    "step_per_commit": ("the same / the SQLite commit of its process", "x", None),
    "step_ram_ms": ("the same on a RAM disk (`/dev/shm`: the CPU cost, no real fsync)", "ms", None),
    "commit_ms": ("SQLite commit alone (the floor, same process)", "ms", None),
}


def _child(root: str) -> dict[str, float]:
    """Measure the engine of ``root`` (run in a fresh process: ``--child ROOT``)."""
    sys.path[:0] = [f"{root}/functions"]
    import loom

    if not loom.__file__ or not Path(loom.__file__).is_relative_to(root):
        raise SystemExit(f"imported {loom.__file__}, not the engine under {root}")
    return asyncio.run(_measure())


async def _measure() -> dict[str, float]:
    from core import concurrent  # pyright: ignore[reportMissingImports]
    from loom import EffectContext, FlowContext, Loom
    from loom.runtime import Runtime
    from loom.store import SqliteEventStore

    app = Loom("bench")

    @app.effect("noop")
    async def noop(ctx: EffectContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        return n

    @app.flow("steps")
    async def steps(ctx: FlowContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        for i in range(n):
            await ctx.execute(noop, i)
        return n

    def runtime(where: str | None = None) -> Runtime:
        store = SqliteEventStore(Path(tempfile.mkdtemp(prefix="loom-bench-", dir=where)) / "l.db")
        return Runtime(app, store)

    async def sequential(rt: Runtime) -> float:
        empty: list[float] = []
        ten: list[float] = []
        for i in range(40):
            for n, into in ((0, empty), (10, ten)):
                t = time.perf_counter()
                await rt.start("steps", n, execution_id=f"s{n}-{i}")
                into.append(time.perf_counter() - t)
        return (statistics.median(ten) - statistics.median(empty)) / 10 * 1000

    # The 50-flow rows are the one measurement bench/run.py and bench/durability.py report.
    in_loop, served = await concurrent(repeats=3), await concurrent(repeats=3, off_loop=True)
    step_ms, floor_ms = await sequential(runtime()), commit_ms()
    ram = RAM_DISK if os.path.isdir(RAM_DISK) else None  # noqa: ASYNC240 - once, at start
    return {
        "concurrent_s": in_loop["total_s"],
        "served_s": served["total_s"],
        "step_ms": step_ms,
        "step_per_commit": step_ms / floor_ms,
        "step_ram_ms": await sequential(runtime(ram)),
        "commit_ms": floor_ms,
    }


def markdown(medians: dict[str, dict[str, float]], rounds: int, command: str) -> str:
    """A dated section for ``RESULTS.md``."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    base, this = medians["baseline"], medians["this"]
    lines = [
        f"### Group commit, {when}",
        "",
        f"`{command}` on {platform.machine()}, Python {platform.python_version()}: "
        f"{rounds} rounds, each one process per checkout, alternating; medians over rounds.",
        "",
        "| what | before | after | before / after | target |",
        "|---|---:|---:|---:|---|",
    ]
    for key, (label, unit, target) in FIGURES.items():
        goal = "" if target is None else f"<= {target:g} {unit}"
        lines.append(
            f"| {label} | {base[key]:.3f} {unit} | {this[key]:.3f} {unit} "
            f"| {base[key] / this[key]:.2f}x | {goal} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, help="another checkout of this repository")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--record", action="store_true", help="append the table to RESULTS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    if args.baseline is None:
        parser.error("--baseline is required: a checkout to compare with")
    medians = compare(Path(__file__).resolve(), args.baseline.resolve(), args.rounds, FIGURES, 600)
    command = f"python bench/group_commit.py --baseline <main checkout> --rounds {args.rounds}"
    section = markdown(medians, args.rounds, command)
    print(section)
    if args.record:
        record(section)


def record(section: str) -> None:
    """Add ``section`` under the side-by-side heading of ``RESULTS.md`` (kept by run.py)."""
    results = HERE / "RESULTS.md"
    text = results.read_text()
    if SIDE_BY_SIDE not in text:
        text = text.rstrip("\n") + f"\n\n{SIDE_BY_SIDE}\n\n{SIDE_BY_SIDE_INTRO}\n"
    results.write_text(text.rstrip("\n") + "\n\n" + section)


if __name__ == "__main__":
    main()
