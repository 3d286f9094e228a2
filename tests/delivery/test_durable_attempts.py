"""Attempt numbers and the retry budget are per step and durable across worker deaths.

A real worker process runs a step whose effect always fails under ``Retry(max_attempts=5)``
and is SIGKILLed during its third attempt. The recovering call continues at attempt 4 and
stops after attempt 5: five invocations in all, never a fresh budget.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from loom.config import open_store
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import run_loom


def _kill_at_attempt(db: str, side: Path, eid: str, attempt: int) -> int:
    env = {"LOOM_TEST_DIE_AT_ATTEMPT": str(attempt)}
    return run_loom("tests.delivery.crash_app:app", db, side, "execute", eid, env=env)


async def test_a_worker_killed_mid_retry_does_not_reset_the_attempts(tmp_path: Path):
    db, side, eid = f"sqlite:///{tmp_path}/loom.db", tmp_path / "side.txt", "flaky-1"
    runtime = Runtime(crash_app.app, open_store(db))
    await runtime.start("crash.flaky", None, execution_id=eid, run=False)
    assert _kill_at_attempt(db, side, eid, 3) == -signal.SIGKILL
    assert side.read_text().split() == [f"{eid}:1", "1", f"{eid}:1", "2", f"{eid}:1", "3"]

    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    result = await runtime.execute(ExecutionPackage(execution_id=eid))
    assert result.status == "completed"
    assert result.output == "gave up: effect 'side.flaky' failed at step 1: attempt 5 failed"
    attempts = [int(line.split()[1]) for line in side.read_text().splitlines()]
    assert attempts == [1, 2, 3, 4, 5]  # at most two more after the kill, numbered on
    history = await runtime.history(eid)
    retried = [e.attempt for e in history if e.type == "EffectRetried"]
    assert retried == [2, 3, 4, 5]  # the history shows every retry, before it ran
    first = next(e for e in history if e.type == "EffectRetried")
    assert first.error is not None and first.error.message == "attempt 1 failed"


async def test_a_worker_killed_in_the_last_attempt_leaves_no_attempt(tmp_path: Path):
    db, side, eid = f"sqlite:///{tmp_path}/loom.db", tmp_path / "side.txt", "flaky-2"
    runtime = Runtime(crash_app.app, open_store(db))
    await runtime.start("crash.flaky", None, execution_id=eid, run=False)
    assert _kill_at_attempt(db, side, eid, 5) == -signal.SIGKILL
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    result = await runtime.execute(ExecutionPackage(execution_id=eid))
    assert result.output is not None and "no attempt is left" in result.output
    assert len(side.read_text().splitlines()) == 5  # nothing ran after the kill
    failed = [e for e in await runtime.history(eid) if e.type == "EffectFailed"]
    assert [e.error.code for e in failed] == ["retries_exhausted"]


async def test_an_idempotent_step_that_succeeds_first_time_costs_one_write(tmp_path: Path):
    runtime = Runtime(crash_app.app, open_store(f"sqlite:///{tmp_path}/loom.db"))
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    await runtime.start("crash.idempotent", None, execution_id="ok")
    types = [e.type for e in await runtime.history("ok")]
    assert "EffectRetried" not in types
    assert types.count("EffectCompleted") == 2
