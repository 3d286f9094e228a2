"""Chaos on the Firestore emulator at scale: thousands of executions, workers killed.

The run of ``tests/chaos/test_firestore_chaos.py``, larger: ``--workers`` functions-framework
workers over one emulator database, ``--executions`` executions of ``tests.chaos.app``
(``--steps`` steps each, a durable timer, child flows, message exchanges,
``continue_as_new``, a queue of concurrency 2) arriving over ``--arrivals`` seconds, every
dispatch delivered to two or three workers at once, a random worker SIGKILLed every
``--kill-min``-``--kill-max`` seconds and started again, steps parked in doubt settled from
the ledger of real invocations. The invariants are checked on the raw documents (see
``tests/chaos/invariants.py``); the exit status is 1 when any is broken.

Run from the repository root (starts the emulator unless ``FIRESTORE_EMULATOR_HOST`` is set)::

    python bench/chaos_firestore.py --executions 1000 --steps 10 [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.*, tests.*

from tests.chaos.run import ChaosConfig, ChaosReport, run_chaos

from bench.firestore_ops import emulator

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Chaos on the Firestore emulator"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-min", type=float, default=0.3)
    parser.add_argument("--kill-max", type=float, default=0.8)
    parser.add_argument(
        "--arrivals", type=float, default=None, help="seconds (default: 0.3 s each)"
    )
    parser.add_argument("--chaos", type=float, default=None, help="seconds of kills at most")
    parser.add_argument("--settle", type=float, default=600.0)
    parser.add_argument("--sweep-grace", type=float, default=30.0)
    parser.add_argument("--queued-every", type=int, default=10, help="one in N on the queue")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=32,
        help="request threads per worker (as Cloud Run's concurrency plus two for the probes; "
        "with too few, most deliveries are answered 503 busy and redelivered)",
    )
    parser.add_argument("--json", type=Path, help="write the whole report here")
    parser.add_argument("--record", action="store_true", help="add the figures to RESULTS.md")
    return parser.parse_args()


def _config(args: argparse.Namespace) -> ChaosConfig:
    arrivals = args.arrivals if args.arrivals is not None else 0.3 * args.executions
    return ChaosConfig(
        executions=args.executions,
        steps=args.steps,
        workers=args.workers,
        kill_every=(args.kill_min, args.kill_max),
        arrivals_seconds=arrivals,
        chaos_seconds=args.chaos if args.chaos is not None else arrivals * 3 + 120,
        settle_seconds=args.settle,
        sweep_grace=args.sweep_grace,
        queued_every=args.queued_every,
        seed=args.seed,
        threads=args.threads,
    )


def markdown(report: ChaosReport, command: str) -> str:
    """The figures as a section of RESULTS.md."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    facts, queue, did = report.facts, report.queue, report.operator
    rows = [
        ("executions (roots and children)", facts["executions"]),
        ("final statuses", ", ".join(f"{k} {v}" for k, v in sorted(facts["statuses"].items()))),
        ("events in the raw logs", facts["events"]),
        ("effect invocations in the ledger", facts["invocations"]),
        ("workers SIGKILLed (and started again)", report.kills),
        ("median seconds for a worker to answer after its start", f"{report.worker_startup_s:.1f}"),
        ("deliveries (tasks, copies included)", f"{queue.get('deliveries', 0)} ({queue.get('tasks', 0)})"),
        ("answers 200 / 409 / 500 / 503 / unreachable", " / ".join(
            str(queue.get(k, 0)) for k in ("http 200", "http 409", "http 500", "http 503", "unreachable")
        )),
        ("in-doubt verdicts performed / not_performed", f"{did.get('verdict performed', 0)} / "
         f"{did.get('verdict not_performed', 0)}"),
        ("poison-parked executions retried", did.get("poison retried", 0)),
        ("most queued executions in flight (limit 2)", facts["queue_highest_in_flight"]),
        ("seconds (with kills)", f"{report.seconds:.0f} ({report.chaos_seconds:.0f})"),
        ("invariant checks / violations", f"{sum(report.findings['checked'].values())} / "
         f"{report.violations}"),
    ]  # fmt: skip
    lines = [
        f"{HEADING} ({now})",
        "",
        f"`{command}` on one emulator, the test process as the task queue (every dispatch "
        "to two or three workers at once) and as the operator (sweep, verdicts from the "
        "ledger, poison retries); invariants checked on the raw documents.",
        "",
        "| what | figure |",
        "|---|---:|",
        *(f"| {what} | {figure} |" for what, figure in rows),
    ]
    for invariant, count in report.findings["violations"].items():
        examples = "; ".join(report.findings["examples"][invariant])
        lines.append(f"\nViolated: {invariant} ({count}), e.g. {examples}")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = _args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("loom.chaos").setLevel(logging.INFO)
    config = _config(args)
    with emulator(), tempfile.TemporaryDirectory() as tmp:
        report = asyncio.run(run_chaos(config, Path(tmp)))
    whole = json.dumps(report.__dict__, indent=1, default=str)
    if args.json:
        args.json.write_text(whole)
    command = f"python bench/chaos_firestore.py {' '.join(sys.argv[1:])}".strip()
    section = markdown(report, command.replace(" --record", ""))
    print(whole)
    print(section)
    if args.record:
        RESULTS.write_text(RESULTS.read_text().rstrip("\n") + "\n\n" + section)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
