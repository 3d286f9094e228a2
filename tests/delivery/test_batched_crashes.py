"""The crash matrix in batched durability: a worker SIGKILLed between unforced appends and
the next durable point, on SQLite and on the Firestore emulator.

Completions of idempotent steps since the last durable point are lost with the process, and
only those: the next execute invokes them again with the same keys and the execution ends as
in strict mode. A non-idempotent step's intent record is a durable point: what came before
it is never invoked again, and the step itself is never silently re-run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from loom.config import open_store
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import assert_each_outcome_once, invocations_per_step

ROOT = Path(__file__).resolve().parents[2]

# crash point → (status after recovery, invocations of each key in the end)
CASES = {
    "after_complete:1": ("completed", {"1": 2, "2": 1, "3": 1}),
    "after_complete:2": ("completed", {"1": 2, "2": 2, "3": 1}),
    "after_intent:3": ("in_doubt", {"1": 1, "2": 1}),
    "after_complete:3": ("completed", {"1": 1, "2": 1, "3": 1}),
    "before_reply": ("completed", {"1": 1, "2": 1, "3": 1}),
}


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/loom.db"
    request.getfixturevalue("firestore_emulator")  # sets FIRESTORE_EMULATOR_HOST
    return f"firestore://loom-test/b{uuid.uuid4().hex[:24]}"


def _kill_worker(db: str, side: Path, eid: str, point: str) -> int:
    env = {
        **os.environ,
        "LOOM_APP": "tests.delivery.crash_app:app",
        "LOOM_STORE": db,
        "LOOM_TEST_SIDE_FILE": str(side),
        "LOOM_CRASH_AT": point,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "loom", "execute", eid],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
async def test_unforced_steps_are_reinvoked_with_the_same_keys(db: str, tmp_path: Path, point: str):
    side, eid = tmp_path / "side.txt", f"batched-{point.replace(':', '-')}"
    runtime = Runtime(crash_app.app, open_store(db))
    await runtime.start("crash.batched", None, execution_id=eid, run=False)
    assert _kill_worker(db, side, eid, point) == -signal.SIGKILL
    before = await runtime.history(eid)
    if point.startswith("after_complete:") and point != "after_complete:3":
        # Nothing was forced yet: not even the claim reached the store.
        assert [e.type for e in before] == ["ExecutionStarted"]
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    recovered = Runtime(crash_app.app, open_store(db))
    result = await recovered.execute(ExecutionPackage(execution_id=eid))
    status, invocations = CASES[point]
    assert result.status == status
    assert invocations_per_step(side, eid) == invocations
    events = await recovered.history(eid)
    assert_each_outcome_once(events)
    if status == "completed":
        assert result.output == f"done:{eid}:3".upper()
