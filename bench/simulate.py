"""The simulator's long mode: many seeds over several processes, and what they found.

Runs seeds ``start .. start+seeds-1`` of ``tests.sim`` (each a whole simulated deployment:
workers dying at awaits, duplicate deliveries, store outages and lost answers, clock jumps,
an operator settling doubts from the ledger; then every invariant checked), in chunks
spread over ``--jobs`` processes, and prints a summary to paste into ``bench/RESULTS.md``:
seeds per second, executions checked, violations by invariant and, for each invariant, the
first seeds that broke it (each reproduced alone by ``python -m tests.sim --seed N``).

Run from the repository root::

    python bench/simulate.py --seeds 100000 --jobs 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.sim


@dataclass
class Chunk:
    """What one chunk of seeds came to."""

    seeds: int = 0
    executions: int = 0
    virtual_seconds: float = 0.0
    violations: Counter[str] = field(default_factory=Counter[str])
    failing: dict[str, list[int]] = field(default_factory=dict[str, list[int]])
    failing_seeds: int = 0

    def add(self, other: Chunk, keep: int) -> None:
        """Fold ``other`` into this one, keeping ``keep`` seeds per invariant."""
        self.seeds += other.seeds
        self.executions += other.executions
        self.virtual_seconds += other.virtual_seconds
        self.violations.update(other.violations)
        self.failing_seeds += other.failing_seeds
        for name, seeds in other.failing.items():
            mine = self.failing.setdefault(name, [])
            mine.extend(seeds[: max(0, keep - len(mine))])


def run_chunk(first: int, count: int, keep: int) -> Chunk:
    """Run ``count`` seeds from ``first`` in this process."""
    from tests.sim.runner import run_seed

    chunk = Chunk()
    for seed in range(first, first + count):
        report = run_seed(seed)
        chunk.seeds += 1
        chunk.executions += sum(report.statuses.values())
        chunk.virtual_seconds += report.virtual_seconds
        if report.violations:
            chunk.failing_seeds += 1
        for name, n in report.by_invariant().items():
            chunk.violations[name] += n
            seeds = chunk.failing.setdefault(name, [])
            if len(seeds) < keep:
                seeds.append(seed)
    return chunk


def _run_chunk(task: tuple[int, int, int]) -> Chunk:
    return run_chunk(*task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--chunk", type=int, default=500, help="seeds per process task")
    parser.add_argument("--keep", type=int, default=5, help="seeds listed per invariant")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    total = Chunk()
    bounds = [
        (s, min(args.chunk, args.start + args.seeds - s))
        for s in range(args.start, args.start + args.seeds, args.chunk)
    ]
    # A fresh process every few chunks: the engine keeps a little per cancelled session.
    # (``multiprocessing.Pool``: Python 3.11's executor stops replacing the workers it
    # retires after ``max_tasks_per_child`` and waits for ever.)
    tasks = [(first, count, args.keep) for first, count in bounds]
    with multiprocessing.Pool(args.jobs, maxtasksperchild=4) as pool:
        for done, chunk in enumerate(pool.imap(_run_chunk, tasks), start=1):
            total.add(chunk, args.keep)
            if done % max(1, len(tasks) // 20) == 0:
                print(
                    f"  {total.seeds} seeds, {sum(total.violations.values())} violations",
                    file=sys.stderr,
                    flush=True,
                )
    took = time.perf_counter() - started
    print(report(args, total, took))
    return 0 if not total.violations else 1


def report(args: argparse.Namespace, total: Chunk, took: float) -> str:
    """The summary, as a section of ``bench/RESULTS.md``."""
    from tests.sim.invariants import INVARIANTS

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {now} on {platform.machine()} with Python {platform.python_version()}, by "
        f"`python bench/simulate.py --seeds {args.seeds} --start {args.start} "
        f"--jobs {args.jobs}`.",
        "",
        "| what | value |",
        "|---|---:|",
        f"| seeds | {total.seeds} |",
        f"| wall time | {took:.0f} s |",
        f"| seeds per second ({args.jobs} processes) | {total.seeds / took:.1f} |",
        f"| executions checked | {total.executions} |",
        f"| virtual time simulated | {total.virtual_seconds / 3600:.0f} h |",
        f"| invariants checked in every run | {len(INVARIANTS)} |",
        f"| seeds breaking an invariant | {total.failing_seeds} |",
        f"| violations | {sum(total.violations.values())} |",
    ]
    if total.violations:
        lines += ["", "| invariant | violations | first seeds |", "|---|---:|---|"]
        for name, n in total.violations.most_common():
            seeds = ", ".join(str(s) for s in total.failing[name])
            lines.append(f"| `{name}` | {n} | {seeds} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
