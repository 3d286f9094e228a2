"""Strict and batched durability on SQLite, side by side with another checkout.

    python bench/durability.py --baseline ../loom-main            # print the table
    python bench/durability.py --baseline ../loom-main --record   # and add it to RESULTS.md

Each round runs one child process per checkout, alternating, so a noisy disk or a busy CPU
hits both alike; every child imports the engine of its own checkout. A checkout without
durable points (``Loom(durability=...)``) measures strict only. Figures are medians over
rounds; ratios are baseline / this checkout (above 1: this checkout is faster), and batched
/ strict within this checkout.
"""

# No `from __future__ import annotations`: the flows below are defined in a function, after
# the engine to measure is importable, and the engine resolves their annotations.

import asyncio
import datetime as dt
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from alternate import commit_ms  # pyright: ignore[reportMissingImports]
from alternate import main as alternate_main  # pyright: ignore[reportMissingImports]

HERE = Path(__file__).resolve().parent
FIGURES = {
    "strict_step_ms": ("sequential idempotent step, strict (marginal)", "ms", None),
    "batched_step_ms": ("sequential idempotent step, batched (marginal)", "ms", 0.05),
    "batched_step_cpu_ms": ("the same, CPU time of the process (less noisy)", "ms", 0.05),
    "strict_50_s": ("50 concurrent 10-step flows, strict, in-loop", "s", 0.05),
    "strict_50_cpu_s": ("the same, CPU time of the process", "s", None),
    "strict_50_commits": ("the same, SQLite transactions committed (fsync'd)", "", None),
    "batched_50_s": ("50 concurrent 10-step flows, batched, in-loop", "s", None),
    "batched_50_cpu_s": ("the same, CPU time of the process", "s", None),
    "commit_ms": ("SQLite commit alone (the floor, same process)", "ms", None),
    "strict_commits": ("commits of one 10-step idempotent execution, strict", "", None),
}


def _child(root: str) -> dict[str, float]:
    """Measure the engine of ``root`` (run in a fresh process: ``--child ROOT``)."""
    sys.path[:0] = [f"{root}/functions"]
    import loom

    if not loom.__file__ or not Path(loom.__file__).is_relative_to(root):
        raise SystemExit(f"imported {loom.__file__}, not the engine under {root}")
    return asyncio.run(_measure())


def _app(durability: str) -> Any:
    from loom import EffectContext, FlowContext, Loom

    app = Loom("bench") if durability == "strict" else Loom("bench", durability=durability)  # type: ignore[call-arg]

    @app.effect("noop")
    async def noop(ctx: EffectContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        return n

    @app.flow("steps")
    async def steps(ctx: FlowContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        for i in range(n):
            await ctx.execute(noop, i)
        return n

    return app


async def _measure() -> dict[str, float]:
    from core import concurrent  # pyright: ignore[reportMissingImports]
    from loom.runtime import Runtime
    from loom.store import SqliteEventStore

    def runtime(durability: str) -> Runtime:
        path = Path(tempfile.mkdtemp(prefix="loom-bench-")) / "l.db"
        return Runtime(_app(durability), SqliteEventStore(path))

    async def sequential(rt: Runtime, steps: int) -> float:
        """Marginal ms per step: a long flow against an empty one, medians over runs."""
        empty: list[float] = []
        full: list[float] = []
        for i in range(15):
            for n, into in ((0, empty), (steps, full)):
                t = time.perf_counter()
                await rt.start("steps", n, execution_id=f"s{n}-{i}")
                into.append(time.perf_counter() - t)
        return (statistics.median(full) - statistics.median(empty)) / steps * 1000

    out: dict[str, float] = {"commit_ms": commit_ms()}
    out["strict_commits"] = await commits(runtime("strict"))
    modes = ["strict"]
    try:
        _app("batched")
        modes.append("batched")
    except TypeError:  # a checkout without durable points
        out.update(batched_step_ms=math.nan, batched_50_s=math.nan, batched_step_cpu_ms=math.nan)
        out.update(batched_50_cpu_s=math.nan)
    for mode in modes:
        # The same measurement as bench/run.py's row (one function for both).
        flows = await concurrent(repeats=5, durability=mode)
        out[f"{mode}_50_s"] = flows["total_s"]
        out[f"{mode}_50_cpu_s"] = flows["cpu_s"]
        if mode == "strict":
            out["strict_50_commits"] = float(flows["commits"])
        # Strict steps each wait for an fsync: 10 steps say enough. Batched steps cost
        # microseconds: 500 of them rise above the flow's fixed cost.
        out[f"{mode}_step_ms"] = await sequential(runtime(mode), 10 if mode == "strict" else 500)
    if "batched" in modes:
        rt, cpu = runtime("batched"), list[float]()
        for i in range(5):
            c = time.process_time()
            await rt.start("steps", 1000, execution_id=f"cpu{i}")
            cpu.append((time.process_time() - c) / 1000 * 1000)
        out["batched_step_cpu_ms"] = statistics.median(cpu)
    return out


async def commits(rt: Any) -> float:
    """SQLite commits (the start and every append) of one 10-step strict execution."""
    store, made = rt.store, [0]
    append, create = store.append, store.create

    async def counted_append(request: Any) -> int:
        made[0] += 1
        return await append(request)

    async def counted_create(started: Any) -> Any:
        made[0] += 1
        return await create(started)

    store.append, store.create = counted_append, counted_create
    await rt.start("steps", 10, execution_id="commits")
    return float(made[0])


def _cell(value: float, unit: str) -> str:
    return "—" if math.isnan(value) else f"{value:.3f} {unit}"


def markdown(medians: dict[str, dict[str, float]], rounds: int, command: str) -> str:
    """A dated section for ``RESULTS.md``."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    base, this = medians["baseline"], medians["this"]
    lines = [
        f"### Durable points, {when}",
        "",
        f"`{command}` on {platform.machine()}, Python {platform.python_version()}: "
        f"{rounds} rounds, each one process per checkout, alternating; medians over rounds.",
        "",
        "| what | before | after | before / after | target |",
        "|---|---:|---:|---:|---|",
    ]
    for key, (label, unit, target) in FIGURES.items():
        goal = "" if target is None else f"<= {target:g} {unit}"
        ratio = "—" if math.isnan(base[key]) else f"{base[key] / this[key]:.2f}x"
        lines.append(
            f"| {label} | {_cell(base[key], unit)} | {_cell(this[key], unit)} | {ratio} | {goal} |"
        )
    step = this["strict_step_ms"] / this["batched_step_ms"]
    flows = this["strict_50_s"] / this["batched_50_s"]
    lines += [
        "",
        f"Within this checkout, strict / batched: {step:.1f}x per step, {flows:.1f}x for 50 flows.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    alternate_main(
        __doc__ or "", Path(__file__).resolve(), _child, FIGURES, markdown, rounds=5, timeout=900
    )


if __name__ == "__main__":
    main()
