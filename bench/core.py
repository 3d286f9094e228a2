"""Engine benchmarks on the embedded default (SQLite on disk, every append fsync'd).

Each function returns a dict of figures; ``bench/run.py`` runs them side by side and writes
``bench/RESULTS.md``. Medians throughout: these machines are noisy.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store import SqliteEventStore

ROOT = Path(__file__).resolve().parents[1]

app = Loom("bench")


@app.effect("noop")
async def noop(ctx: EffectContext, n: int) -> int:
    """Does nothing: what is measured is the durable step around it."""
    return n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    """``n`` sequential durable steps."""
    for i in range(n):
        await ctx.execute(noop, i)
    return n


@app.flow("steps_then_wait")
async def steps_then_wait(ctx: FlowContext, n: int) -> int:
    """``n`` steps, then a gate."""
    for i in range(n):
        await ctx.execute(noop, i)
    await ctx.suspend("go", "k")
    return n


def _db() -> Path:
    return Path(tempfile.mkdtemp(prefix="loom-bench-")) / "loom.db"


def fsync_baseline(commits: int = 2000) -> dict[str, Any]:
    """One tiny SQLite transaction per commit, WAL + synchronous=FULL: the floor we build on."""
    con = sqlite3.connect(_db(), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    times: list[float] = []
    for i in range(commits):
        t = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO t VALUES (?, ?)", (i, '{"type":"EffectCompleted"}'))
        con.execute("COMMIT")
        times.append(time.perf_counter() - t)
    return {"sqlite_commit_ms": statistics.median(times) * 1000}


async def _flows(runtime: Runtime, flow: str, n: int, count: int, tag: str) -> list[float]:
    times: list[float] = []
    for i in range(count):
        t = time.perf_counter()
        result = await runtime.start(flow, n, execution_id=f"{tag}-{i}")
        times.append(time.perf_counter() - t)
        assert result.status in ("completed", "suspended"), result
    return times


async def _interleaved(
    runtime: Runtime, runs: list[tuple[str, int]], rounds: int, tag: str
) -> dict[int, list[float]]:
    """Run each (flow, n) once per round, alternating, so the disk's mood hits all alike."""
    times: dict[int, list[float]] = {n: [] for _, n in runs}
    for r in range(rounds):
        for flow, n in runs:
            times[n] += await _flows(runtime, flow, n, 1, f"{tag}-{n}-{r}")
    return times


async def noop_step(flows: int = 200, steps_per_flow: int = 10) -> dict[str, Any]:
    """200 flows x 10 durable no-op steps, alternating with empty flows (the fixed cost)."""
    runtime = Runtime(app, SqliteEventStore(_db()))
    await _flows(runtime, "steps", steps_per_flow, 20, "warm")
    times = await _interleaved(runtime, [("steps", 0), ("steps", steps_per_flow)], flows, "n")
    empty, per_flow = statistics.median(times[0]), statistics.median(times[steps_per_flow])
    return {
        "flows": flows,
        "steps_per_flow": steps_per_flow,
        "all_in_ms_per_step": per_flow / steps_per_flow * 1000,
        "marginal_ms_per_step": (per_flow - empty) / steps_per_flow * 1000,
        "empty_flow_ms": empty * 1000,
    }


async def scaling(small: int = 100, large: int = 10_000, rounds: int = 5) -> dict[str, Any]:
    """Per-step cost of a long execution against a short one (no re-reading per step)."""
    runtime = Runtime(app, SqliteEventStore(_db()))
    await _flows(runtime, "steps", small, 3, "warm")
    times = await _interleaved(runtime, [("steps", small), ("steps", large)], rounds, "s")
    small_t = statistics.median(times[small]) / small
    large_t = statistics.median(times[large]) / large
    return {
        f"ms_per_step_at_{small}": small_t * 1000,
        f"ms_per_step_at_{large}": large_t * 1000,
        "ratio": large_t / small_t,
    }


class _Parked:
    """A dispatcher that only records: the resume call is measured without the run."""

    inline = False

    async def dispatch(self, package: Any, dispatch_id: str, not_before: Any = None) -> None:
        return None


async def resume_long(n: int = 10_000, repeats: int = 15) -> dict[str, Any]:
    """Resume of a suspended n-step execution: the resume call (snapshot + tail + append),
    and the whole execute call that follows (replaying n recorded steps)."""
    store = SqliteEventStore(_db())
    runtime = Runtime(app, store)
    resume_times: list[float] = []
    execute_times: list[float] = []
    from loom.wire import ExecutionPackage

    for i in range(repeats):
        eid = f"long-{i}"
        await runtime.start("steps_then_wait", n, execution_id=eid)
        parked = Runtime(app, store, dispatcher=_Parked())  # type: ignore[arg-type]
        t = time.perf_counter()
        await parked.resume(eid, "go", "k", None)
        resume_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        done = await runtime.execute(ExecutionPackage(execution_id=eid))
        execute_times.append(time.perf_counter() - t)
        assert done.status == "completed"
    return {
        "steps": n,
        "resume_call_ms": statistics.median(resume_times) * 1000,
        "execute_after_resume_ms": statistics.median(execute_times) * 1000,
    }


async def empty_flow_memory(flows: int = 200, rounds: int = 9) -> dict[str, Any]:
    """The engine's own cost per execution: an empty flow (start, claim, complete, report)
    on the in-memory store, so no disk is in it. CPU time of the process per flow, median
    over rounds (after a round to warm up), and the wall time alike."""
    from loom.store import InMemoryEventStore

    runtime = Runtime(app, InMemoryEventStore())
    cpu: list[float] = []
    wall: list[float] = []
    for r in range(-1, rounds):
        t, c = time.perf_counter(), time.process_time()
        for i in range(flows):
            await runtime.start("steps", 0, execution_id=f"empty-{r}-{i}")
        if r >= 0:
            cpu.append((time.process_time() - c) / flows)
            wall.append((time.perf_counter() - t) / flows)
    return {"cpu_ms": statistics.median(cpu) * 1000, "wall_ms": statistics.median(wall) * 1000}


def steps_app(durability: str = "strict") -> Loom:
    """An app with the ``steps`` flow alone, at ``durability`` (``bench/durability.py``)."""
    if durability == "strict":
        return app
    batched = Loom("bench", durability=durability)
    batched.effect("noop")(noop.fn)
    batched.flow("steps")(steps)
    return batched


async def concurrent(
    flows: int = 50,
    steps_per_flow: int = 10,
    repeats: int = 7,
    *,
    off_loop: bool = False,
    durability: str = "strict",
) -> dict[str, Any]:
    """50 concurrent 10-step flows on one SQLite file: total wall time, medians over rounds.

    The one measurement of this workload (``bench/run.py`` and ``bench/durability.py`` both
    report it): a fresh database, one unmeasured round of the same flows first (imports,
    statement caches, the group committer's grouping mode), then ``repeats`` rounds. Their
    appends are group-committed: on the loop by default (the CLI), on the writer thread with
    ``off_loop`` (a served worker). Also reports the process's CPU time per round and the
    transactions a round committed, which say where the wall time goes.
    """
    store = SqliteEventStore(_db())
    if off_loop:
        store.serve_off_loop()
    runtime = Runtime(steps_app(durability), store)
    # A checkout measured side by side may predate the committer's counter: no count then.
    group = getattr(store, "_group", None)
    totals: list[float] = []
    cpu: list[float] = []
    commits: list[int] = []
    for r in range(-1, repeats):
        before, t, c = _commits(group), time.perf_counter(), time.process_time()
        await asyncio.gather(
            *(
                runtime.start("steps", steps_per_flow, execution_id=f"c{r}-{i}")
                for i in range(flows)
            )
        )
        if r >= 0:  # round -1 warms up
            totals.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            commits.append(_commits(group) - before)
    await store.aclose()
    return {
        "flows": flows,
        "steps_per_flow": steps_per_flow,
        "total_s": statistics.median(totals),
        "cpu_s": statistics.median(cpu),
        "commits": statistics.median(commits),
    }


def _commits(group: Any) -> int:
    return int(getattr(group, "commits", 0))


_FIRST_RUN = textwrap.dedent("""
    import asyncio, sys, tempfile
    from loom import Loom
    from loom.runtime import Runtime
    from loom.store import SqliteEventStore
    app = Loom("cold")
    @app.effect("one")
    async def one(ctx, n: int) -> int:
        return n
    @app.flow("f")
    async def f(ctx, n: int) -> int:
        return await ctx.execute(one, n)
    rt = Runtime(app, SqliteEventStore(tempfile.mkdtemp() + "/l.db"))
    assert asyncio.run(rt.start("f", 1, execution_id="x")).status == "completed"
""")


def _wall(args: list[str], repeats: int) -> float:
    times: list[float] = []
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(args, check=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def startup(repeats: int = 9) -> dict[str, Any]:
    """``python -c "import loom"`` and process start → first finished one-step execution."""
    bare = _wall([sys.executable, "-c", "pass"], repeats)
    return {
        "python_bare_s": bare,
        "import_loom_s": _wall([sys.executable, "-c", "import loom"], repeats),
        "first_execution_s": _wall([sys.executable, "-c", _FIRST_RUN], repeats),
    }
