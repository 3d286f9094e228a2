"""The strict step against the disk's floor: commits that overwrite, commits that grow.

    python bench/floor.py [--rounds 9]                                # this checkout alone
    python bench/floor.py --baseline ../other-checkout [--record]     # two, side by side

Each round measures, in one process and in an order that rotates from round to round:

* **overwrite**: a bare one-row SQLite commit (WAL, ``synchronous=FULL``, one page) into a
  WAL that earlier commits grew and a checkpoint restarted: the frames overwrite written
  space. This is the floor a durable step is held against.
* **growing**: the same commit into a fresh file with checkpoints off: every commit writes
  past the WAL's end, so the file system also journals the new size.
* **strict step, fresh store**: a flow of ``--steps`` idempotent no-op steps on a new
  ``sqlite:///`` store (``loom.config.open_store``: the engine's own settings), as a user
  gets it; the time between one effect's invocation and the next, median over the flow.
  Each step is one fsync'd commit (the previous step's completion) and the engine's work.
* **strict step, warm store**: the same flow on a store that ran ``--warm`` steps before.

Ratios are taken within each round (so a busy moment hits both sides alike), then medians.
With ``--baseline``, each round runs one child process per checkout, alternating which goes
first; each child measures the above for its own engine and reports its medians. Also
counted: WAL frames (pages) written per strict step, a count the machine does not move.
"""

# No `from __future__ import annotations`: the flow below is defined after the engine to
# measure is importable, and the engine resolves its annotations.

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from alternate import THIS, record  # noqa: E402  # pyright: ignore[reportMissingImports]

COMMITS = 200  # bare commits per measurement
KINDS = ("overwrite", "growing", "fresh", "warm")


def _connect(path: Path, checkpoint: bool) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    if not checkpoint:
        con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")
    con.execute("INSERT OR IGNORE INTO t VALUES (1, '')")
    return con


def _commits(con: sqlite3.Connection, n: int) -> float:
    """Median ms of ``n`` one-row, one-page commits (each a new value: a page SQLite writes)."""
    times: list[float] = []
    for i in range(n):
        value = f"{time.perf_counter_ns()}:{i}" * 4
        t = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE t SET v=? WHERE k=1", (value,))
        con.execute("COMMIT")
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


class Floor:
    """The files one process measures on: a grown WAL for overwrites, a warm store."""

    def __init__(self, steps: int, warm: int) -> None:
        from loom.config import open_store

        self.dir = Path(tempfile.mkdtemp(prefix="loom-floor-"))
        self.steps = steps
        self.overwrite = _connect(self.dir / "overwrite.db", checkpoint=False)
        _commits(self.overwrite, COMMITS * 3)  # grown well past what a round overwrites
        self.fresh_count = self.warm_count = 0
        self.marks: list[float] = []
        self.app = _app(self.marks)
        self.warm_store = open_store(f"sqlite:///{self.dir / 'warm.db'}")
        asyncio.run(self._flow(self.warm_store, warm, "warm-up"))

    def measure(self, kind: str) -> float:
        """One measurement of ``kind`` (ms)."""
        if kind == "overwrite":
            self.overwrite.execute("PRAGMA wal_checkpoint(RESTART)")  # next frames from 0
            return _commits(self.overwrite, COMMITS)
        if kind == "growing":
            self.fresh_count += 1
            con = _connect(self.dir / f"growing-{self.fresh_count}.db", checkpoint=False)
            try:
                return _commits(con, COMMITS)
            finally:
                con.close()
        if kind == "fresh":
            from loom.config import open_store

            self.fresh_count += 1
            store = open_store(f"sqlite:///{self.dir / f'fresh-{self.fresh_count}.db'}")
            return asyncio.run(self._flow(store, self.steps, "fresh", close=True))
        self.warm_count += 1
        return asyncio.run(self._flow(self.warm_store, self.steps, f"warm-{self.warm_count}"))

    async def _flow(self, store: Any, steps: int, eid: str, close: bool = False) -> float:
        from loom.runtime import Runtime

        self.marks.clear()
        result = await Runtime(self.app, store).start("steps", steps, execution_id=eid)
        assert result.status == "completed", result
        if close:
            await store.aclose()
        gaps = [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]
        return statistics.median(gaps) * 1000 if gaps else 0.0


def _app(marks: list[float]) -> Any:
    from loom import EffectContext, FlowContext, Loom

    app = Loom("floor")

    @app.effect("noop")
    async def noop(ctx: EffectContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        marks.append(time.perf_counter())
        return n

    @app.flow("steps")
    async def steps(ctx: FlowContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        for i in range(n):
            await ctx.execute(noop, i)
        return n

    return app


def wal_pages_per_step(steps: int = 100) -> float:
    """WAL frames written per strict step of a sequential flow (checkpoints off)."""
    from loom.runtime import Runtime
    from loom.store import SqliteEventStore

    db = Path(tempfile.mkdtemp(prefix="loom-floor-")) / "pages.db"
    store = SqliteEventStore(db)
    store._con().execute("PRAGMA wal_autocheckpoint=0")  # pyright: ignore[reportPrivateUsage]
    runtime = Runtime(_app([]), store)

    async def run(eid: str, n: int) -> int:
        await runtime.start("steps", n, execution_id=eid)
        return wal_frames(db)

    before = asyncio.run(run("warm", 5))
    after = asyncio.run(run("counted", steps))
    return (after - before) / steps


def wal_frames(db: Path) -> int:
    """Frames of the WAL's current generation (their salts match the header's)."""
    data = Path(f"{db}-wal").read_bytes()
    if len(data) < 32:
        return 0
    page_size, salts = struct.unpack(">I", data[8:12])[0], data[16:24]
    count, offset = 0, 32
    while offset + 24 + page_size <= len(data) and data[offset + 8 : offset + 16] == salts:
        count += 1
        offset += 24 + page_size
    return count


def measure(rounds: int, steps: int, warm: int) -> dict[str, float]:
    """Medians over ``rounds`` of every kind and of the ratios within each round."""
    floor = Floor(steps, warm)
    runs: dict[str, list[float]] = {k: [] for k in (*KINDS, "fresh_x", "warm_x", "growing_x")}
    for r in range(rounds):
        order = KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]
        got = {kind: floor.measure(kind) for kind in order}
        for kind, ms in got.items():
            runs[kind].append(ms)
        for kind in ("fresh", "warm", "growing"):
            runs[f"{kind}_x"].append(got[kind] / got["overwrite"])
        print(f"round {r + 1}/{rounds}: {json.dumps(got)}", file=sys.stderr)
    out = {k: statistics.median(v) for k, v in runs.items()}
    out["pages_per_step"] = wal_pages_per_step()
    out["load_1min"] = os.getloadavg()[0]
    return out


LABELS = {
    "overwrite": ("one-row commit, overwriting a grown WAL (the floor)", "ms"),
    "growing": ("one-row commit, growing the WAL", "ms"),
    "fresh": ("strict step, fresh store", "ms"),
    "warm": ("strict step, warm store", "ms"),
    "growing_x": ("growing commit / overwrite commit", "x"),
    "fresh_x": ("strict step, fresh store / overwrite commit", "x"),
    "warm_x": ("strict step, warm store / overwrite commit", "x"),
    "pages_per_step": ("WAL pages written per strict step", ""),
    "load_1min": ("load average (1 min) at the end", ""),
}
TARGETS = {"fresh_x": "<= 2x", "warm_x": "<= 1.5x"}


def markdown(columns: dict[str, dict[str, float]], rounds: int, command: str) -> str:
    """A dated section for ``RESULTS.md``: one column per checkout."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    names = list(columns)
    lines = [
        f"### The strict step against the disk's floor, {when}",
        "",
        f"`{command}` on {platform.machine()}, Python {platform.python_version()}, "
        f"{rounds} rounds; ratios within each round, then medians.",
        "",
        f"| what | {' | '.join(names)} | target |",
        f"|---|{'---:|' * len(names)}---|",
    ]
    for key, (label, unit) in LABELS.items():
        cells = " | ".join(f"{columns[n][key]:.3f} {unit}".rstrip() for n in names)
        lines.append(f"| {label} | {cells} | {TARGETS.get(key, '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=100, help="steps of each measured flow")
    parser.add_argument("--warm", type=int, default=2000, help="steps the warm store ran first")
    parser.add_argument("--record", action="store_true", help="add the table to RESULTS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path[:0] = [f"{args.child}/functions"]
        print(json.dumps(measure(args.rounds, args.steps, args.warm)))
        return
    command = f"python bench/floor.py --rounds {args.rounds}"
    if args.baseline is None:
        sys.path[:0] = [str(THIS / "functions")]
        columns = {"this checkout": measure(args.rounds, args.steps, args.warm)}
    else:
        command += " --baseline <other checkout>"
        columns = _side_by_side(args.baseline.resolve(), args.rounds)
    section = markdown(columns, args.rounds, command)
    print(section)
    if args.record:
        record(section)


def _side_by_side(baseline: Path, rounds: int) -> dict[str, dict[str, float]]:
    """One child per checkout and round (3 inner rounds each), alternating; medians."""
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this checkout": []}
    for r in range(rounds):
        order = [("baseline", baseline), ("this checkout", THIS)]
        for name, root in order if r % 2 == 0 else order[::-1]:
            argv = [sys.executable, str(Path(__file__)), "--child", str(root), "--rounds", "3"]
            done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900)
            runs[name].append(json.loads(done.stdout.splitlines()[-1]))
            print(f"round {r + 1}/{rounds} {name}: {runs[name][-1]}", file=sys.stderr)
    return {
        name: {key: statistics.median(run[key] for run in results) for key in LABELS}
        for name, results in runs.items()
    }


if __name__ == "__main__":
    main()
