"""``python -m tests.sim --seed N`` runs one seed and prints its report; ``--seeds N`` runs
seeds ``start .. start+N-1`` and prints a line per failing seed and a summary."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tests.sim.invariants import Final
from tests.sim.runner import run_seed
from tests.sim.world import EPOCH


def show(final: Final, execution_id: str) -> None:
    """Print one execution's log and the ledger's invocations of its steps."""
    for event in final.logs.get(execution_id, []):
        fields = event.model_dump(exclude={"schema_version", "seq", "type", "at"})
        print(f"{event.seq:4} {event.at - EPOCH:9.3f} {event.type:18} {fields}")
    for at, worker, what in final.world.trace:
        if execution_id in what.split():
            print(f"     {at:9.3f} {worker or '-':5} {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seed", type=int, help="run this seed and print its report")
    parser.add_argument("--seeds", type=int, default=0, help="run this many seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every report")
    parser.add_argument("--show", metavar="ID", help="with --seed: print this execution's log")
    args = parser.parse_args(argv)
    if args.seed is not None:
        report = run_seed(args.seed, inspect=(lambda f: show(f, args.show)) if args.show else None)
        print(report.text(limit=100))
        print(f"  digest {report.digest}, {report.wall_seconds:.2f} s, stats {dict(report.stats)}")
        return 0 if report.ok else 1
    totals: Counter[str] = Counter()
    failing = 0
    started = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        report = run_seed(seed)
        totals.update(report.by_invariant())
        if not report.ok:
            failing += 1
            print(
                report.text(limit=5)
                if args.verbose
                else f"seed {seed}: {dict(report.by_invariant())}  ({report.repro()})"
            )
    took = time.perf_counter() - started
    print(
        f"{args.seeds} seeds, {failing} failing, {took:.1f} s ({args.seeds / took:.1f} seeds a second)"
    )
    print(f"violations by invariant: {dict(totals)}")
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main())
