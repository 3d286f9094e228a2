"""Group commit on SQLite, measured side by side against another checkout of the engine.

    python bench/group_commit.py --baseline ../loom-main            # print the table
    python bench/group_commit.py --baseline ../loom-main --record   # and add it to RESULTS.md

Each round runs one child process per checkout, alternating, so a noisy disk or a busy CPU
hits both alike; every child imports the engine of its own checkout. Figures are medians
over rounds; ratios are baseline / this checkout (above 1: this checkout is faster).
"""

# No `from __future__ import annotations`: the flows below are defined in a function, after
# the engine to measure is importable, and the engine resolves their annotations.

import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from alternate import commit_ms  # pyright: ignore[reportMissingImports]
from alternate import main as alternate_main  # pyright: ignore[reportMissingImports]

HERE = Path(__file__).resolve().parent
RAM_DISK = "/dev/shm"
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
    alternate_main(
        __doc__ or "", Path(__file__).resolve(), _child, FIGURES, markdown, rounds=7, timeout=600
    )


if __name__ == "__main__":
    main()
