"""Poison executions: a worker that dies at the same step again and again.

Real worker processes run a step whose effect SIGKILLs its own process, twice. The next
execute call (``max_idle_claims=2``) parks the execution as ``poison`` instead of running it
a third time; redeliveries leave it parked; ``loom ls`` shows why; ``loom retry`` runs it
again, and with the fault gone it completes.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from click.testing import CliRunner

from loom.cli import main
from loom.cli.authority import local_principal
from loom.config import open_store
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import run_loom

APP = "tests.delivery.crash_app:app"


def _die_in_effect(db: str, side: Path, eid: str) -> int:
    return run_loom(APP, db, side, "execute", eid, env={"LOOM_TEST_DIE_IN_EFFECT": "1"})


def _lines(side: Path) -> list[str]:
    return side.read_text().splitlines()


async def _poison(db: str, side: Path, eid: str) -> str:
    store = open_store(db)
    runtime = Runtime(crash_app.app, store, max_idle_claims=2)
    await runtime.start("crash.idempotent", None, execution_id=eid, run=False)
    for _ in range(2):
        assert _die_in_effect(db, side, eid) == -signal.SIGKILL
    assert len(_lines(side)) == 2

    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    parked = await runtime.execute(ExecutionPackage(execution_id=eid))
    assert parked.status == "suspended" and parked.parked_reason is not None
    assert len(_lines(side)) == 2  # the third call did not run the step
    seq = len(await runtime.history(eid))
    again = await runtime.execute(ExecutionPackage(execution_id=eid))  # a redelivery
    assert again.parked_reason == parked.parked_reason
    assert len(await runtime.history(eid)) == seq  # left alone: nothing appended, nothing run
    await store.aclose()
    return parked.parked_reason


async def _outcome(db: str, eid: str) -> tuple[str, object, list[str]]:
    store = open_store(db)
    runtime = Runtime(crash_app.app, store)
    result = await runtime.result(eid)
    by = [e.by for e in await runtime.history(eid) if e.type == "ExecutionRetried"]
    await store.aclose()
    return result.status, result.output, by


def test_a_poison_execution_parks_and_loom_retry_runs_it_again(tmp_path: Path):
    db, side, eid = f"sqlite:///{tmp_path}/loom.db", tmp_path / "side.txt", "poison-1"
    reason = asyncio.run(_poison(db, side, eid))
    assert reason.startswith("poison")

    runner = CliRunner()
    listed = runner.invoke(main, ["--store", db, "ls"])
    assert listed.exit_code == 0 and "poison" in listed.output
    retried = runner.invoke(main, ["--app", APP, "--store", db, "retry", eid, "--by", "ops"])
    assert retried.exit_code == 0, retried.output
    status, output, by = asyncio.run(_outcome(db, eid))
    # The CLI acts as the local user; --by is a note beside it, never the authority.
    who = local_principal()
    assert (status, output, by) == ("completed", f"done:{eid}:1".upper(), [f"ops (via {who})"])


async def test_progress_between_claims_is_not_poison(tmp_path: Path):
    """Executions that move on between their calls never count as stuck."""
    store = open_store(f"sqlite:///{tmp_path}/loom.db")
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    runtime = Runtime(crash_app.app, store, max_idle_claims=1)
    result = await runtime.start("crash.idempotent", None, execution_id="fine")
    assert result.status == "completed"
    await store.aclose()


def test_retry_refuses_an_execution_that_is_not_parked(tmp_path: Path):
    db = f"sqlite:///{tmp_path}/loom.db"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    runner = CliRunner()
    started = runner.invoke(main, ["--app", APP, "--store", db, "start", "crash.idempotent"])
    assert started.exit_code == 0, started.output
    store = open_store(db)
    eid = asyncio.run(store.list())[0].execution_id
    asyncio.run(store.aclose())
    refused = runner.invoke(main, ["--app", APP, "--store", db, "retry", eid])
    assert refused.exit_code == 2 and "not parked" in refused.output
