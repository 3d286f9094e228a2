"""CPU instructions of the engine, counted by valgrind's callgrind, side by side.

    python bench/instructions.py --baseline ../other-checkout

Wall and CPU time on a shared 2-core machine move by tens of percent from one minute to the
next; an instruction count moves far less with the machine's load, so it compares two
checkouts of the engine where timings cannot. Each figure is the count of a run with more
work minus a run with less, in fresh processes under ``callgrind`` with ``PYTHONHASHSEED=0``
and ``gc.freeze()`` after a warm-up (start-up, imports and the warm-up cancel out):

* one round of 50 concurrent 10-step strict flows on SQLite (4 rounds minus 1);
* one sequential idempotent step, batched, on SQLite (a 1,300-step flow minus a 300-step one).

Needs ``valgrind`` (Debian: ``apt-get install valgrind``). Run the two checkouts back to
back, as this script does: a heavier load stretches a run under callgrind, and timers (the
claim's heartbeat) then fire differently, which moves a count by some percent.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_WORK = """
import asyncio, gc, sys, tempfile
from pathlib import Path
root, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [f"{root}/functions", f"{root}/bench"]
from core import steps_app
from loom.runtime import Runtime
from loom.store import SqliteEventStore

async def main():
    mode = "strict" if kind == "flows" else "batched"
    rt = Runtime(steps_app(mode), SqliteEventStore(Path(tempfile.mkdtemp()) / "l.db"))
    if kind == "flows":
        await asyncio.gather(*(rt.start("steps", 10, execution_id=f"w{i}") for i in range(50)))
    else:
        await rt.start("steps", 50, execution_id="w")
    gc.collect()
    gc.freeze()  # (collections then cost in proportion to the work after this line)
    if kind == "flows":
        for r in range(n):
            await asyncio.gather(
                *(rt.start("steps", 10, execution_id=f"c{r}-{i}") for i in range(50))
            )
    else:
        await rt.start("steps", n, execution_id="x")

asyncio.run(main())
"""

# (what, workload, less, more): the figure is (count(more) - count(less)) / (more - less).
FIGURES = [
    ("one round of 50 concurrent 10-step strict flows on SQLite", "flows", 1, 4),
    ("one sequential idempotent step, batched, on SQLite", "step", 300, 1300),
]


def count(root: Path, kind: str, n: int) -> int:
    """Instructions of one run of ``kind`` with ``n`` (rounds or steps) on ``root``'s engine."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += [sys.executable, "-c", _WORK, str(root), kind, str(n)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise SystemExit(f"no instruction count in callgrind's output:\n{out[-2000:]}")
    return int(found.group(1))


def figure(root: Path, kind: str, less: int, more: int) -> float:
    """Instructions per unit of work (a round, a step) on ``root``'s engine."""
    return (count(root, kind, more) - count(root, kind, less)) / (more - less)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    args = parser.parse_args()
    print("| what | before | after | before / after |\n|---|---:|---:|---:|")
    for what, kind, less, more in FIGURES:
        before = figure(args.baseline.resolve(), kind, less, more)
        after = figure(HERE.parent, kind, less, more)
        print(f"| {what} | {before:,.0f} | {after:,.0f} | {before / after:.2f}x |")


if __name__ == "__main__":
    main()
