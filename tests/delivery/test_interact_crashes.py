"""Updates, event reads and streams across worker deaths: a ``loom`` process SIGKILLed at the
riskiest points, on SQLite and on the Firestore emulator.

After recovery each update is accepted once and answered once with the same value, its
handler's effect ran (at least once, at most once per death), a wait keeps the deadline it
recorded, and a stream holds each value once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from loom.config import open_store
from loom.crash import UPDATE_POINTS
from loom.events import Event
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import interact_app
from tests.delivery.kit import run_loom, store_url

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "firestore"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "i")


def _loom(db: str, side: Path, crash_at: str, *args: str) -> int:
    """Run ``loom ARGS`` in a child process that SIGKILLs itself at ``crash_at``."""
    app = "tests.delivery.interact_app:app"
    return run_loom(app, db, side, *args, timeout=120, env={"LOOM_CRASH_AT": crash_at})


def _types(events: list[Event]) -> list[str]:
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "log has a gap"
    return [e.type for e in events]


def _notes(side: Path) -> list[str]:
    return side.read_text().splitlines() if side.exists() else []


# Where each point kills the worker, and how often the handler's step may have run by then.
KILLS = [(f"{p}:u1", 1) for p in UPDATE_POINTS] + [("after_effect:u1.1", 1)]


@pytest.mark.parametrize(("point", "ran"), KILLS, ids=[k for k, _ in KILLS])
async def test_an_update_whose_worker_dies_is_answered_once_by_its_retry(
    db: str, tmp_path: Path, point: str, ran: int
) -> None:
    side, eid = tmp_path / "side.txt", "tab"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = Runtime(interact_app.app, open_store(db))
    await runtime.start("tab", None, execution_id=eid)
    # The child accepts the update and runs the flow inline: it dies at ``point``.
    code = _loom(db, side, point, "update", eid, "add", '"apple"', "--id", "u1")
    assert code == -signal.SIGKILL
    assert len(_notes(side)) == (0 if point.startswith("after_update_accepted") else ran)
    # The caller retries with the same id: the same update, run by this process now.
    assert await runtime.update(eid, "add", "apple", update_id="u1", timeout=30) == 1
    assert await runtime.update(eid, "add", "apple", update_id="u1", timeout=30) == 1
    assert await runtime.update(eid, "add", "fig", timeout=30) == 2
    await runtime.update(eid, "close", timeout=30)
    result = await runtime.result(eid)
    assert (result.status, result.output) == ("completed", ["apple", "fig"])
    kinds = _types(await runtime.history(eid))
    assert kinds.count("UpdateAccepted") == 3 and kinds.count("UpdateCompleted") == 3
    apples = [n for n in _notes(side) if n.endswith(" apple")]
    # Re-run only when its worker died after the step ran and before its answer was kept.
    assert 1 <= len(apples) <= 2
    if point.startswith("after_update_completed"):
        assert len(apples) == 1


async def test_a_reader_killed_while_waiting_keeps_its_recorded_deadline(
    db: str, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    runtime = Runtime(interact_app.app, open_store(db))
    await runtime.start("publisher", None, execution_id="pub")
    await runtime.start("reader", {"of": "pub", "timeout": 3}, execution_id="rd", run=False)
    code = _loom(db, side, "after_event_awaited:1", "execute", "rd")
    assert code == -signal.SIGKILL
    state = await runtime.load_state("rd")
    deadline = state.steps["1"]["deadline"]
    assert state.steps["1"]["status"] == "waiting"
    await asyncio.sleep(max(0.0, deadline - time.time()) + 0.2)  # the wait's time is spent
    began = time.monotonic()
    done = await runtime.execute(ExecutionPackage(execution_id="rd"))  # the redelivery
    assert (done.status, done.output) == ("completed", None)
    assert time.monotonic() - began < 2  # not a fresh wait of 3 s
    kinds = _types(await runtime.history("rd"))
    assert kinds.count("EventAwaited") == 1 and kinds.count("EventRead") == 1


async def test_a_reader_killed_while_waiting_gets_the_value_published_meanwhile(
    db: str, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    runtime = Runtime(interact_app.app, open_store(db))
    await runtime.start("publisher", None, execution_id="pub2")
    await runtime.start("reader", {"of": "pub2", "timeout": 60}, execution_id="rd2", run=False)
    assert _loom(db, side, "after_event_awaited:1", "execute", "rd2") == -signal.SIGKILL
    await runtime.resume("pub2", "go", "publisher")
    done = await runtime.execute(ExecutionPackage(execution_id="rd2"))
    assert (done.status, done.output) == ("completed", "yes")
    again = await runtime.execute(ExecutionPackage(execution_id="rd2"))  # a duplicate
    assert again.output == "yes"
    assert _types(await runtime.history("rd2")).count("EventRead") == 1


@pytest.mark.parametrize("step", ["2", "4"])
async def test_a_writer_killed_after_a_value_streams_each_value_once(
    db: str, tmp_path: Path, step: str
) -> None:
    side, eid = tmp_path / "side.txt", f"w{step}"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = Runtime(interact_app.app, open_store(db))
    await runtime.start("writer", 3, execution_id=eid, run=False)
    assert _loom(db, side, f"after_stream_written:{step}", "execute", eid) == -signal.SIGKILL
    done = await runtime.execute(ExecutionPackage(execution_id=eid))
    assert done.status == "completed"
    assert [v async for v in runtime.stream(eid, "out")] == [0, 1, 2]
    assert _types(await runtime.history(eid)).count("StreamWritten") == 3
