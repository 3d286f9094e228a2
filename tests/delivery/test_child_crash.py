"""Child flows under SIGKILL, on SQLite and the Firestore emulator.

A worker process runs a parent that starts two child flows one after the other, and dies at
a crash point: after a child was created, after it was dispatched (before the parent
recorded it), after a child's effect was recorded, after a child ended, or before a reply. Recovery is what a
dispatcher's redelivery does: execute calls for every execution still open, until the
parent ends. There must be exactly two children (the ids the parent's steps derive), each
recorded once in the parent's log, each child's effect recorded once, and the parent's
output built from both. A child killed after its end but before telling its parent
(``child_ended``) tells it on the redelivery.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from loom.config import open_store
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import run_loom, store_url

POINTS = ["child_created:1", "child_dispatched:1", "child_created:2", "after_complete:1"]
POINTS += ["child_ended", "before_reply"]


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "f")


def _run_and_die(db: str, side: Path, eid: str, point: str) -> int:
    args = ("start", "crash.parent", "--id", eid, "--wait", "2")
    return run_loom("tests.delivery.crash_app:app", db, side, *args, env={"LOOM_CRASH_AT": point})


async def _redeliver(runtime: Runtime, eid: str) -> str:
    """Execute every execution again, as the redelivery of the dead worker's tasks would
    (an ended child's tells its parent), until the parent ends."""
    for _ in range(6):
        for summary in await runtime.store.list():
            await runtime.execute(ExecutionPackage(execution_id=summary.execution_id))
        status = (await runtime.result(eid)).status
        if status != "running" and status != "suspended":
            return status
    return (await runtime.result(eid)).status


@pytest.mark.parametrize("point", POINTS)
async def test_a_parent_killed_around_its_children_never_starts_two(
    db: str, tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
):
    side, eid = tmp_path / "side.txt", f"fam-{point.replace(':', '-')}"
    monkeypatch.setenv("LOOM_TEST_SIDE_FILE", str(side))
    assert _run_and_die(db, side, eid, point) == -signal.SIGKILL
    runtime = Runtime(crash_app.app, open_store(db))
    try:
        assert await _redeliver(runtime, eid) == "completed"
        kids = [f"{eid}.child.1", f"{eid}.child.2"]
        assert sorted(s.execution_id for s in await runtime.store.list()) == sorted([eid, *kids])
        result = await runtime.result(eid)
        assert result.output == [f"done:{kid}:1" for kid in kids]
        events = await runtime.history(eid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        started = Counter(e.child_id for e in events if e.type == "ChildStarted")  # type: ignore[union-attr]
        assert started == Counter(kids)
        for kid in kids:
            done = [e for e in await runtime.history(kid) if e.type == "EffectCompleted"]
            assert len(done) == 1
        keys = Counter(line.split()[0] for line in side.read_text().splitlines())
        assert set(keys) == {f"{kid}:1" for kid in kids}
        assert all(n <= 2 for n in keys.values())  # idempotent: again only with the same key
    finally:
        await runtime.store.aclose()
