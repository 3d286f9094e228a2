"""Child handles, forks through children and bulk operations under SIGKILL, on SQLite and
the Firestore emulator.

A ``loom`` process dies at the riskiest await of each:

* a cancel through a child's handle: requested in the child's log, not yet recorded in the
  parent's (``child_cancel_requested``), and around it;
* a fork that shares a running child: created and parked (``fork_created``), and copied but
  not yet recorded in the child's log (``fork_copied``);
* a bulk cancel: after its first execution (``bulk_applied:1``).

Recovery is what a redelivery or an operator does: execute calls for every open execution,
or the same command again. Nothing is done twice: one cancel request per child, one cleanup
each, one child per step, every end told to whoever waits for it.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from loom.config import open_store
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import family_app
from tests.delivery.kit import run_loom, store_url

APP = "tests.delivery.family_app:app"


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "fam")


@pytest.fixture
def side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "side.txt"
    monkeypatch.setenv("LOOM_TEST_SIDE_FILE", str(where))
    return where


def _noted(side: Path) -> Counter[str]:
    lines = side.read_text().splitlines() if side.exists() else []
    return Counter(lines)


async def _redeliver(runtime: Runtime, eid: str) -> str:
    """Execute every execution again, as the redelivery of the dead worker's tasks would (an
    ended child's tells its parent), until ``eid`` ends."""
    for _ in range(6):
        for row in await runtime.store.list():
            await runtime.execute(ExecutionPackage(execution_id=row.execution_id))
        status = (await runtime.result(eid)).status
        if status not in ("running", "suspended"):
            return status
    return (await runtime.result(eid)).status


@pytest.mark.parametrize(
    "point", ["child_created:1", "child_cancel_requested:2", "child_ended", "before_reply"]
)
async def test_a_cancel_through_the_handle_killed_midway_is_made_once(
    db: str, side: Path, point: str
):
    eid = f"hc-{point.replace(':', '-')}"
    args = ("start", "fam.canceller", "--id", eid)
    assert run_loom(APP, db, side, *args, env={"LOOM_CRASH_AT": point}) == -signal.SIGKILL
    runtime = Runtime(family_app.app, open_store(db))
    try:
        assert await _redeliver(runtime, eid) == "completed"
        assert (await runtime.result(eid)).output == "child cancelled"
        kid = await runtime.history(f"{eid}-kid")
        assert [e.type for e in kid].count("CancelRequested") == 1
        assert kid[-1].type == "ExecutionCancelled"
        parent = [e.type for e in await runtime.history(eid)]
        assert parent.count("ChildCancelRequested") == parent.count("ChildStarted") == 1
        noted = _noted(side)
        assert noted[f"{eid}-kid:2 cleanup"] <= 2  # idempotent: again only under its key
        assert noted[f"{eid}-kid:2 cleanup"] >= 1
        assert {line.split()[0] for line in noted} == {f"{eid}-kid:2", f"{eid}:3"}
    finally:
        await runtime.store.aclose()


@pytest.mark.parametrize("point", ["fork_created", "fork_copied"])
async def test_a_fork_killed_before_its_child_knows_of_it_is_told_its_end(
    db: str, side: Path, point: str
):
    eid, fork = f"ov-{point}", f"ov-{point}-fork"
    runtime = Runtime(family_app.app, open_store(db))
    try:
        assert (await runtime.start("fam.overseer", None, execution_id=eid)).status == "suspended"
        args = ("fork", eid, "--from-step", "3", "--id", fork)
        assert run_loom(APP, db, side, *args, env={"LOOM_CRASH_AT": point}) == -signal.SIGKILL
        if point == "fork_created":  # parked until the copy lands: the same fork completes it
            assert (await runtime.result(fork)).parked_reason is not None
            assert run_loom(APP, db, side, *args) == 0
        else:  # copied: a redelivery of the fork's execute call tells the child of it
            await runtime.execute(ExecutionPackage(execution_id=fork))
        kid = f"{eid}.child.1"
        assert [e.type for e in await runtime.history(kid)].count("ChildShared") == 1
        await runtime.resume(fork, "ok", f"{fork}:ok")
        await runtime.resume(eid, "ok", f"{eid}:ok")
        await runtime.send(kid, "go", "now")
        assert await _redeliver(runtime, fork) == "completed"
        assert (await runtime.result(fork)).output == "got now"
        assert (await runtime.result(eid)).output == "got now"
        noted = _noted(side)
        assert noted[f"{kid}:2 got now"] == 1  # the child ran once, for both
        assert f"{fork}.child.1" not in {row.execution_id for row in await runtime.store.list()}
    finally:
        await runtime.store.aclose()


async def test_a_bulk_cancel_killed_after_its_first_execution_finishes_the_rest_once(
    db: str, side: Path
):
    runtime = Runtime(family_app.app, open_store(db))
    ids = [f"bk-{n}" for n in range(3)]
    try:
        for eid in ids:
            assert (await runtime.start("fam.approval", None, execution_id=eid)).status == (
                "suspended"
            )
        args = ("bulk", "cancel", "--flow", "fam.approval", "--reason", "closing")
        assert run_loom(APP, db, side, *args, env={"LOOM_CRASH_AT": "bulk_applied:1"}) == (
            -signal.SIGKILL
        )
        states = [(await runtime.result(eid)).status for eid in ids]
        assert states.count("cancelled") == 1  # the newest, then it died
        assert run_loom(APP, db, side, *args) == 0
        for eid in ids:
            history = [e.type for e in await runtime.history(eid)]
            assert history.count("CancelRequested") == history.count("ExecutionCancelled") == 1
        assert _noted(side) == Counter({f"{eid}:2 undo": 1 for eid in ids})
    finally:
        await runtime.store.aclose()
