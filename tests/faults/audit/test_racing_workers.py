"""Several worker processes executing one execution at the same moment (duplicate and
overlapping Cloud Tasks deliveries), on SQLite on disk and on the Firestore emulator.

Fault: three real ``loom execute`` processes are started together on an execution that was
created and never run; its first step is a non-idempotent effect that records itself in a
ledger and takes a moment.

Promise checked: the claim appended at the end of the log lets one process run it and
supersedes the others (exit without invoking anything): the effect ran exactly once, the
log is gap-free with one outcome per step, and the execution is completed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loom.config import open_store
from loom.runtime import Runtime
from tests.delivery.kit import ROOT, assert_each_outcome_once, store_url
from tests.faults.audit.audit_app import app
from tests.faults.harness import Ledger

APP = "tests.faults.audit.audit_app:app"
pytestmark = pytest.mark.slow  # real worker processes
RACERS = 3


def _race(env: dict[str, str]) -> list[int]:
    """Start the racing ``loom execute`` processes together; their exit codes."""
    argv = [sys.executable, "-m", "loom", "execute", "r-1"]
    quiet = subprocess.DEVNULL
    racers = [
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=quiet, stderr=quiet) for _ in range(RACERS)
    ]
    return [p.wait(timeout=90) for p in racers]


@pytest.fixture(params=["sqlite", "firestore"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL every racing process opens."""
    return store_url(request, tmp_path, "race")


async def test_racing_executes_invoke_the_effect_once(db: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {**os.environ, "LOOM_APP": APP, "LOOM_STORE": db, "LOOM_TEST_SIDE_FILE": str(ledger)}
    runtime = Runtime(app, open_store(db))
    try:
        value = {"how": "slow", "kind": "sync"}
        await runtime.start("audit.once", value, execution_id="r-1", run=False)
        codes = await asyncio.to_thread(_race, env)
        assert 0 in codes, codes
        assert Ledger(ledger).keys() == ["r-1:1"], "the non-idempotent effect ran twice"
        events = await runtime.history("r-1")
        assert_each_outcome_once(events)
        assert (await runtime.result("r-1")).status == "completed"
    finally:
        await runtime.store.aclose()
