"""A worker SIGKILLed during a cancelled flow's cleanup, on SQLite and the Firestore emulator.

``loom cancel`` records the request and runs the cleanup in its own process, which dies at a
crash point inside it. A fresh execute call replays the cancel at its recorded place and
resumes the cleanup: each compensation runs once (the idempotent one at most twice with one
key, when the process died between its return and its record), nothing is recorded twice,
and the execution ends ``cancelled``.
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

# crash point → invocations of (compensation 3, compensation 4) the log may show afterwards
POINTS = {
    "before_intent:4": (1, 1),
    "after_complete:3": (1, 1),
    "after_effect:3": (2, 1),  # idempotent: invoked again with the same key
    "after_complete:4": (1, 1),
    "before_reply": (1, 1),
}


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "k")


def _cancel_and_die(db: str, side: Path, eid: str, point: str) -> int:
    args = ("cancel", eid, "--reason", "stop")
    return run_loom("tests.delivery.crash_app:app", db, side, *args, env={"LOOM_CRASH_AT": point})


@pytest.mark.parametrize("point", list(POINTS))
async def test_a_cleanup_killed_midway_resumes_without_doubling(
    db: str, tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
):
    side, eid = tmp_path / "side.txt", f"saga-{point.replace(':', '-')}"
    monkeypatch.setenv("LOOM_TEST_SIDE_FILE", str(side))
    runtime = Runtime(crash_app.app, open_store(db))
    try:
        started = await runtime.start("crash.saga", None, execution_id=eid)
        assert started.status == "suspended"
        assert _cancel_and_die(db, side, eid, point) == -signal.SIGKILL
        before = [e.type for e in await runtime.history(eid)]
        assert "CancelRequested" in before
        assert (before[-1] == "ExecutionCancelled") == (point == "before_reply")

        result = await runtime.execute(ExecutionPackage(execution_id=eid))
        assert result.status == "cancelled" and result.error is not None
        assert result.error["message"] == "stop"
        events = await runtime.history(eid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        outcomes = Counter(e.step_id for e in events if e.type == "EffectCompleted")  # type: ignore[union-attr]
        assert outcomes == Counter({"1": 1, "3": 1, "4": 1})
        kinds = [e.type for e in events]
        assert kinds.count("CancelDelivered") == kinds.count("ExecutionCancelled") == 1
        keys = Counter(line.split()[0] for line in side.read_text().splitlines())
        assert (keys[f"{eid}:3"], keys[f"{eid}:4"]) == POINTS[point]
        assert keys[f"{eid}:1"] == 1
    finally:
        await runtime.store.aclose()
