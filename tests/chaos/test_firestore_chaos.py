"""Chaos on the Firestore emulator: real worker processes killed while they work.

Three ``functions-framework`` workers over one emulator database run a few dozen
executions (steps of both kinds, a durable timer, a child flow, a message exchange, a
``continue_as_new``, a queue of concurrency 2); every dispatch is delivered to two or three
workers at once, a worker is SIGKILLed every few hundred milliseconds and started again,
and steps parked in doubt are settled from the ledger of real invocations. The invariants
are then checked on the raw documents (see :mod:`tests.chaos.run` and
:mod:`tests.chaos.invariants`). ``bench/chaos_firestore.py`` runs the same at scale.

The task queue that duplicates deliveries is the test's own (Cloud Tasks' emulator
delivers one task at a time, never two copies at once): see :mod:`tests.chaos.tasks`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.run import ChaosConfig, run_chaos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

CI = ChaosConfig(
    executions=24,
    steps=6,
    workers=3,
    copies=(2, 3),
    kill_every=(0.3, 0.8),
    arrivals_seconds=20.0,
    chaos_seconds=60.0,
    settle_seconds=90.0,
    sweep_grace=10.0,
    seed=31,
)


async def test_executions_under_kills_and_duplicate_deliveries_keep_every_invariant(
    firestore_emulator: str, tmp_path: Path
) -> None:
    report = await run_chaos(CI, tmp_path)
    shown = json.dumps(report.__dict__, indent=1, default=str)
    # The run was chaos: workers died, deliveries were doubled and collided.
    assert report.kills >= 10, shown
    assert report.queue["deliveries"] > report.queue["tasks"], shown
    assert report.queue.get("http 409", 0) + report.queue.get("unreachable", 0) > 0, shown
    roots_and_children = report.facts["executions"]
    assert roots_and_children > CI.executions, shown  # children ran too
    assert report.violations == 0, shown
